"""Timing calls in interleaved rounds, so that the machine's load falls on every candidate alike.

Standard library only: benchmarks/edge_peer.py uses it in an environment of its own.
"""

import statistics
import time


def wall_times(call, runs, warmup=0):
    """Wall times in seconds of `runs` calls of `call()`, after `warmup` untimed ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(call, steps, warmup):
    """Median wall time in seconds of `call()` over `steps` runs after `warmup` untimed ones."""
    return statistics.median(wall_times(call, steps, warmup))


def interleaved_ms(calls, rounds, runs, progress=print):
    """`{key: ms}` of `{key: zero-argument call}`: two warm-up calls each, then `rounds` rounds that call each in turn
    `runs` times; a figure is the median over rounds of the round's median, in milliseconds (wall clock).

    Needs only the standard library (benchmarks/edge_peer.py uses it in its own environment).
    """
    for call in calls.values():  # warm-up (XNNPACK packs weights on the first call)
        call()
        call()
    times = {key: [] for key in calls}
    for r in range(rounds):
        for key, call in calls.items():
            one = []
            for _ in range(runs):
                start = time.perf_counter()
                call()
                one.append(time.perf_counter() - start)
            times[key].append(statistics.median(one))
        progress(f"    latency round {r + 1}/{rounds} done")
    return {key: 1000 * statistics.median(v) for key, v in times.items()}
