"""Where a second thread helps a `.tflite` or `.onnx` file, op type by op type (issue 11's 2-thread bar).

    .venv/bin/python -m benchmarks.op_time FILE_OR_FOLDER [...] [--runs 20] [--top 5]

For each `.tflite` and `.onnx` file (a folder: every such file in it, sorted):
- the whole graph's batch-1 latency on 1 and 2 threads (LiteRT with XNNPACK; onnxruntime's CPU
  provider, sequential), in alternation over `--rounds` rounds (median of the rounds' medians) so that
  the machine's load falls on both alike;
- every op's time on 1 and on 2 threads, summed per op type and place. TFLite: each op timed alone
  (`export.profile.op_times`: a one-op model fed its inputs' values from a whole-graph run, on XNNPACK
  where the whole graph gives it XNNPACK, else on LiteRT's builtin kernels; place "xnnpack" or
  "builtin"). ONNX: each node's kernel time inside whole-graph runs, from onnxruntime's profiler
  (`export.onnx_profile.onnx_op_times`); place "ort, split" where a worker thread ran part of the
  node in the 2-thread runs, "ort, not split" where the node stayed on one thread;
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


# places whose kernels do not use the second thread: LiteRT's builtin kernels, onnxruntime nodes it did not split
ONE_THREAD_PLACES = ("builtin", "ort, not split")


def by_op_type(path, runs, input_shape=None):
    """`{(op, place): {"count", "ms_1", "ms_2"}}` on 1 and 2 threads; place as in the module docstring."""
    if path.endswith(".onnx"):
        from export.onnx_profile import onnx_op_times

        one, two = onnx_op_times(path, 1, runs, input_shape), onnx_op_times(path, 2, runs, input_shape)
        one = {o["index"]: o for o in one}
        pairs = [(one[b["index"]], b, "ort, split" if b["parallel"] else "ort, not split")
                 for b in two if b["index"] in one]
    else:
        from export.profile import op_times

        pairs = [(a, b, "xnnpack" if a["xnnpack"] else "builtin")
                 for a, b in zip(op_times(path, 1, runs), op_times(path, 2, runs))]
    rows = collections.defaultdict(lambda: {"count": 0, "ms_1": 0.0, "ms_2": 0.0})
    for a, b, place in pairs:
        row = rows[(a["op"], place)]
        row["count"] += 1
        row["ms_1"] += a["ms"]
        row["ms_2"] += b["ms"]
    return dict(rows)


def graph_ms(path, rounds, runs, input_shape=None):
    """`{1: ms, 2: ms}`: whole-graph batch-1 latency (XNNPACK; onnxruntime's CPU provider), the two thread counts
    timed in alternation."""
    from export.onnx_profile import onnx_graph_latency_ms
    from export.profile import graph_latency_ms

    times = {1: [], 2: []}
    for _ in range(rounds):
        for threads in (1, 2):
            times[threads].append(onnx_graph_latency_ms(path, threads, runs, input_shape) if path.endswith(".onnx")
                                  else graph_latency_ms(path, threads, True, runs))
    return {t: float(np.median(v)) for t, v in times.items()}


def measure(paths, rounds=5, runs=20, progress=print, input_shape=None):
    """One result per file: {"file", "graph_ms": {1, 2}, "speedup", "ops": by_op_type rows as a list, sorted by the
    time lost to a second thread (ms_2 - ms_1 / 2), largest first}."""
    out = []
    for path in paths:
        start = time.perf_counter()
        rows = [{"op": op, "where": where, **v, "lost_ms": v["ms_2"] - v["ms_1"] / 2}
                for (op, where), v in by_op_type(path, runs, input_shape).items()]
        rows.sort(key=lambda r: -r["lost_ms"])
        graph = graph_ms(path, rounds, runs, input_shape)
        out.append({"file": os.path.basename(path), "graph_ms": graph, "speedup": graph[1] / graph[2], "ops": rows})
        progress(f"{os.path.basename(path)}: {graph[1]:.2f} / {graph[2]:.2f} ms ({time.perf_counter() - start:.0f} s)")
    return out


def markdown(results, top=5):
    """The summary table and, per file, its `top` op types by time lost to the second thread."""
    lines = ["| file | ms, 1 thread | ms, 2 threads | speed-up | ops, 1 / 2 threads (ms) | builtin (TFLite) / "
             "not split (ONNX) kernels, 1 / 2 threads (ms) | most time lost to the second thread |", "|---|---|---|---|---|---|---|"]
    for r in results:
        ops = r["ops"]
        total = [sum(o[k] for o in ops) for k in ("ms_1", "ms_2")]
        builtin = [sum(o[k] for o in ops if o["where"] in ONE_THREAD_PLACES) for k in ("ms_1", "ms_2")]
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
    parser.add_argument("paths", nargs="+", help=".tflite / .onnx files or folders of them")
    parser.add_argument("--rounds", type=int, default=5, help="whole-graph latency rounds (default 5)")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per op and per round (default 20)")
    parser.add_argument("--top", type=int, default=5, help="op types listed per file (default 5)")
    parser.add_argument("--input-shape", default=None, metavar="H,W,C",
                        help="input shape without the batch, for .onnx files of dynamic height and width "
                             "(.tflite files have a static shape: ignored for them)")
    args = parser.parse_args(argv)
    input_shape = None
    if args.input_shape is not None:
        try:
            input_shape = tuple(int(d) for d in args.input_shape.split(","))
        except ValueError:
            parser.exit(2, f"{parser.prog}: error: --input-shape must be comma-separated ints, e.g. 224,224,3. "
                           f"Received: {args.input_shape}\n")
    for flag in ("rounds", "runs", "top"):
        if getattr(args, flag) < 1:
            parser.exit(2, f"{parser.prog}: error: --{flag} must be a positive int. Received: {getattr(args, flag)}\n")
    paths = []
    for p in args.paths:
        if os.path.isdir(p):
            paths += sorted(os.path.join(p, f) for f in os.listdir(p)
                            if f.endswith((".tflite", ".onnx")) and os.path.isfile(os.path.join(p, f)))
        elif os.path.isfile(p) and p.endswith((".tflite", ".onnx")):
            paths.append(p)
        else:
            parser.exit(2, f"{parser.prog}: error: each path must be a .tflite or .onnx file or a folder. "
                           f"Received: {p}\n")
    if not paths:
        parser.exit(2, f"{parser.prog}: error: no .tflite or .onnx file in {', '.join(args.paths)}\n")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ai_edge_litert.interpreter import Interpreter

    from export.onnx_profile import batch1_feed, run_session, profiling_session

    for path in paths:  # a file the runtime cannot load, feed or run is named up front, not after minutes of timing
        try:
            if path.endswith(".onnx"):
                session = profiling_session(path, 1)
                run_session(session, batch1_feed(session, input_shape), path)
            else:
                Interpreter(model_path=path)
        except ValueError as e:
            prefix = "" if path.endswith(".onnx") else f"LiteRT cannot load {path}: "
            parser.exit(2, f"{parser.prog}: error: {prefix}{e}\n")
        except RuntimeError as e:  # export.onnx_profile's messages start with the path
            parser.exit(2, f"{parser.prog}: error: {e}\n")
    try:
        results = measure(paths, args.rounds, args.runs, progress=lambda text: print(text, flush=True),
                          input_shape=input_shape)
    except RuntimeError as e:  # e.g. a graph without nodes, or an op that cannot run alone
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    print()
    print(markdown(results, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
