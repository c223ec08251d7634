"""Where a second thread helps a `.tflite` file, op type by op type (issue 11's 2-thread bar).

    .venv/bin/python -m benchmarks.op_time FILE_OR_FOLDER [...] [--runs 20] [--top 5]

For each `.tflite` file (a folder: every `.tflite` file in it, sorted):
- the whole graph's batch-1 latency in LiteRT (XNNPACK) on 1 and 2 threads, in alternation over
  `--rounds` rounds (median of the rounds' medians) so that the machine's load falls on both alike;
- every op timed alone on 1 and on 2 threads (`export.profile.op_times`: a one-op model fed its
  inputs' values from a whole-graph run, on XNNPACK where the whole graph gives it XNNPACK, else
  on LiteRT's builtin kernels), summed per op type and place;
- what holds the second thread back: per op type, its 2-thread time minus half its 1-thread time
  (the milliseconds a perfect second thread would have saved and did not), largest first.

Prints a summary table (one row per file) and, per file, the `--top` op types by time lost. Nothing
here asserts a time; the figures depend on the machine and its load.
"""

import argparse
import collections
import os
import sys
import time

import numpy as np


def by_op_type(path, runs):
    """`{(op, "xnnpack" | "builtin"): {"count", "ms_1", "ms_2"}}` from `export.profile.op_times` on 1 and 2 threads."""
    from export.profile import op_times

    rows = collections.defaultdict(lambda: {"count": 0, "ms_1": 0.0, "ms_2": 0.0})
    one, two = op_times(path, 1, runs), op_times(path, 2, runs)
    for a, b in zip(one, two):
        row = rows[(a["op"], "xnnpack" if a["xnnpack"] else "builtin")]
        row["count"] += 1
        row["ms_1"] += a["ms"]
        row["ms_2"] += b["ms"]
    return dict(rows)


def graph_ms(path, rounds, runs):
    """`{1: ms, 2: ms}`: whole-graph batch-1 latency (XNNPACK), the two thread counts timed in alternation."""
    from export.profile import graph_latency_ms

    times = {1: [], 2: []}
    for _ in range(rounds):
        for threads in (1, 2):
            times[threads].append(graph_latency_ms(path, threads, True, runs))
    return {t: float(np.median(v)) for t, v in times.items()}


def measure(paths, rounds=5, runs=20, progress=print):
    """One result per file: {"file", "graph_ms": {1, 2}, "speedup", "ops": by_op_type rows as a list, sorted by the
    time lost to a second thread (ms_2 - ms_1 / 2), largest first}."""
    out = []
    for path in paths:
        start = time.perf_counter()
        rows = [{"op": op, "where": where, **v, "lost_ms": v["ms_2"] - v["ms_1"] / 2}
                for (op, where), v in by_op_type(path, runs).items()]
        rows.sort(key=lambda r: -r["lost_ms"])
        graph = graph_ms(path, rounds, runs)
        out.append({"file": os.path.basename(path), "graph_ms": graph, "speedup": graph[1] / graph[2], "ops": rows})
        progress(f"{os.path.basename(path)}: {graph[1]:.2f} / {graph[2]:.2f} ms ({time.perf_counter() - start:.0f} s)")
    return out


def markdown(results, top=5):
    """The summary table and, per file, its `top` op types by time lost to the second thread."""
    lines = ["| file | ms, 1 thread | ms, 2 threads | speed-up | ops alone, 1 / 2 threads (ms) | builtin kernels, "
             "1 / 2 threads (ms) | most time lost to the second thread |", "|---|---|---|---|---|---|---|"]
    for r in results:
        ops = r["ops"]
        total = [sum(o[k] for o in ops) for k in ("ms_1", "ms_2")]
        builtin = [sum(o[k] for o in ops if o["where"] == "builtin") for k in ("ms_1", "ms_2")]
        worst = ops[0] if ops else None
        lost = "n/a" if worst is None else f"{worst['op']} ({worst['where']}) {worst['lost_ms']:.2f} ms"
        lines.append(f"| {r['file']} | {r['graph_ms'][1]:.2f} | {r['graph_ms'][2]:.2f} | {r['speedup']:.2f}x | "
                     f"{total[0]:.2f} / {total[1]:.2f} | {builtin[0]:.2f} / {builtin[1]:.2f} | {lost} |")
    for r in results:
        lines += ["", f"{r['file']}: op types by time lost to the second thread (2-thread ms - 1-thread ms / 2)", "",
                  "| op | kernel | count | ms, 1 thread | ms, 2 threads | speed-up | lost ms |", "|---|---|---|---|---|---|---|"]
        for o in r["ops"][:top]:
            speedup = o["ms_1"] / o["ms_2"] if o["ms_2"] > 0 else float("nan")
            lines.append(f"| {o['op']} | {o['where']} | {o['count']} | {o['ms_1']:.3f} | {o['ms_2']:.3f} | "
                         f"{speedup:.2f}x | {o['lost_ms']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.op_time", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help=".tflite files or folders of them")
    parser.add_argument("--rounds", type=int, default=5, help="whole-graph latency rounds (default 5)")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per op and per round (default 20)")
    parser.add_argument("--top", type=int, default=5, help="op types listed per file (default 5)")
    args = parser.parse_args(argv)
    for flag in ("rounds", "runs", "top"):
        if getattr(args, flag) < 1:
            parser.exit(2, f"{parser.prog}: error: --{flag} must be a positive int. Received: {getattr(args, flag)}\n")
    paths = []
    for p in args.paths:
        if os.path.isdir(p):
            paths += sorted(os.path.join(p, f) for f in os.listdir(p) if f.endswith(".tflite"))
        elif os.path.isfile(p) and p.endswith(".tflite"):
            paths.append(p)
        else:
            parser.exit(2, f"{parser.prog}: error: each path must be a .tflite file or a folder. Received: {p}\n")
    if not paths:
        parser.exit(2, f"{parser.prog}: error: no .tflite file in {', '.join(args.paths)}\n")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ai_edge_litert.interpreter import Interpreter

    for path in paths:  # a file LiteRT cannot load is named up front, not found after minutes of timing
        try:
            Interpreter(model_path=path)
        except ValueError as e:
            parser.exit(2, f"{parser.prog}: error: LiteRT cannot load {path}: {e}\n")
    results = measure(paths, args.rounds, args.runs, progress=lambda text: print(text, flush=True))
    print()
    print(markdown(results, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
