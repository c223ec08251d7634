"""Per-node time of an `.onnx` file in onnxruntime, from onnxruntime's own profiler.

`export.profile` times a `.tflite` file op by op by isolation, because LiteRT's Python API has no
profiler. onnxruntime has one (`SessionOptions.enable_profiling`): every run writes one Chrome-trace
event per node, `<node name>_kernel_time`, with its duration in microseconds, its `op_name`, and
`thread_scheduling_stats`, where `sub_threads[id].num_run` is how many pieces of work each worker thread
of the intra-op pool has run since the session started (a running count, not the node's own).
`onnx_op_times` reads those events, so the time of each node is the kernel's own time inside a
whole-graph run, and a worker's count growing during a node says that the node handed work to the
second thread: the instrument for issue 11's 2-thread bar on the ONNX files.
"""

import json
import os
import tempfile
import time

import numpy as np

from export.profile import check_arguments
from export.verify import first_line as verify_first_line

WARMUP_RUNS = 3
MAX_THREADS = 1024
MAX_INPUT_BYTES = 1 << 30  # a batch-1 input larger than 1 GiB is a mistyped input_shape, not an image


def profiling_session(path, num_threads, profile_prefix=None):
    """A sequential CPU session with `num_threads` intra-op threads (as `benchmarks.edge` times ONNX files)."""
    import onnxruntime

    if num_threads > MAX_THREADS:
        raise ValueError(f"`num_threads` must be at most {MAX_THREADS}. Received: num_threads={num_threads}")
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    try:
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own exception types (InvalidGraph, Fail, ...)
        raise RuntimeError(f"{path}: onnxruntime cannot load the file: {first_line(e)}") from None


def first_line(error):
    """`export.verify.first_line` of an error, or its type's name when its text is empty."""
    return verify_first_line(error) or type(error).__name__


def run_session(session, feed, path):
    """One `session.run`; onnxruntime's own errors (a shape the graph cannot take, ...) as a RuntimeError."""
    try:
        return session.run(None, feed)
    except Exception as e:  # onnxruntime's InvalidArgument, Fail, RuntimeException, ...
        shapes = {name: list(value.shape) for name, value in feed.items()}
        raise RuntimeError(f"{path}: onnxruntime cannot run the file on inputs of shape {shapes}: "
                           f"{first_line(e)}") from None


def batch1_feed(session, input_shape=None):
    """`{input name: seeded batch-1 value}`: floats in [-1, 1], 8- and 16-bit integers over their range, wider
    ones in [0, 255].

    A dynamic batch is fed as 1 (a fixed batch as it is); other dynamic dimensions (a model of any resolution) come from
    `input_shape`, the input's shape without the batch, e.g. `(224, 224, 3)`.
    """
    if input_shape is not None and (not isinstance(input_shape, (tuple, list)) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in input_shape)):
        raise ValueError(f"`input_shape` must be a tuple of positive ints, e.g. (224, 224, 3). "
                         f"Received: input_shape={input_shape!r}")
    feed = {}
    rng = np.random.default_rng(0)
    for detail in session.get_inputs():
        static = all(isinstance(d, int) for d in detail.shape[1:])
        if input_shape is None and not static:
            raise ValueError(f"`input_shape` must be given for an .onnx file whose input {detail.name!r} has dynamic "
                             f"dimensions other than the batch: {detail.shape}. Received: input_shape=None")
        if input_shape is not None and (len(input_shape) != len(detail.shape) - 1 or any(
                isinstance(d, int) and d != given for d, given in zip(detail.shape[1:], input_shape))):
            raise ValueError(f"`input_shape` must fit the input {detail.name!r} {detail.shape} without its batch. "
                             f"Received: input_shape={tuple(input_shape)}")
        batch = detail.shape[0] if detail.shape and isinstance(detail.shape[0], int) else 1  # a fixed batch as is
        shape = [batch, *(detail.shape[1:] if input_shape is None else input_shape)]
        name = detail.type[len("tensor("):-1]
        try:
            dtype = np.dtype({"float": "float32", "double": "float64"}.get(name, name))
        except TypeError:
            dtype = np.dtype("O")
        if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            raise ValueError(f"the input {detail.name!r} is of type {detail.type}: only numeric and bool inputs can "
                             "be fed (an image model's input is float or int)")
        if int(np.prod(shape)) * dtype.itemsize > MAX_INPUT_BYTES:
            raise ValueError(f"the input {detail.name!r} of shape {shape} would take over 1 GiB: "
                             f"`input_shape` is probably mistyped. Received: input_shape={input_shape}")
        if dtype == np.bool_:
            feed[detail.name] = rng.integers(0, 2, shape).astype(bool)
        elif np.issubdtype(dtype, np.integer):  # 8- and 16-bit inputs (quantised pixels) over their range
            info = np.iinfo(dtype)
            low, high = (info.min, info.max) if dtype.itemsize <= 2 else (0, 255)
            feed[detail.name] = rng.integers(low, high, shape, endpoint=True).astype(dtype)
        else:
            feed[detail.name] = rng.uniform(-1, 1, shape).astype(dtype)
    return feed


def onnx_graph_latency_ms(path, num_threads=1, runs=20, input_shape=None):
    """Median wall time in ms of one batch-1 `InferenceSession.run` (CPU provider, sequential), after two warm-up runs.

    Args:
        path: an `.onnx` file; a dynamic batch is fed as 1, a fixed one as it is.
        num_threads: int >= 1, onnxruntime's intra-op threads.
        runs: int >= 1, timed runs.
        input_shape: the input's shape without the batch, e.g. `(224, 224, 3)`; needed only when the
            file's height or width is dynamic.

    Returns:
        float, milliseconds (wall clock: depends on the machine and its load).

    Raises:
        ValueError: `path` is not an existing file, `num_threads` / `runs` is not a positive int (or
            `num_threads` exceeds `MAX_THREADS`), `input_shape` is missing for a file of dynamic height
            and width, or does not fit it, or an input is not numeric.
        RuntimeError: onnxruntime cannot load the file, or cannot run it on the inputs fed.
    """
    path = check_arguments(path, num_threads, runs, kind=".onnx")
    session = profiling_session(path, num_threads)
    feed = batch1_feed(session, input_shape)
    times = []
    run_session(session, feed, path)  # a shape the graph cannot take fails here, named, before any timing
    for i in range(runs + 2):
        start = time.perf_counter()
        session.run(None, feed)
        if i >= 2:
            times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def onnx_op_times(path, num_threads=1, runs=20, input_shape=None):
    """Per-node batch-1 time of an `.onnx` file in onnxruntime's CPU provider, from its profiler.

    The session (sequential, `num_threads` intra-op threads) runs a seeded batch-1 input
    `WARMUP_RUNS + runs` times with profiling on; each node's figure is the median of its
    `<name>_kernel_time` durations over the last `runs` runs. The profiler's own bookkeeping (about
    10 us per node on this project's machine) is outside the kernel times but inside the wall time of a
    profiled run, so compare the sum with `onnx_graph_latency_ms`, not with a profiled run.

    Args:
        path: an `.onnx` file; a dynamic batch is fed as 1, a fixed one as it is.
        num_threads: int >= 1, onnxruntime's intra-op threads.
        runs: int >= 1, profiled runs counted.
        input_shape: the input's shape without the batch, e.g. `(224, 224, 3)`; needed only when the
            file's height or width is dynamic.

    Returns:
        A list, one dict per node that ran, in execution order: {"index" (int, the node's index in the
        graph), "name" (str), "op" (str, the ONNX op type, e.g. "MatMulInteger"), "ms" (float,
        milliseconds: depends on the machine and its load), "parallel" (bool: in at least half of
        the runs counted, a worker thread of the pool ran part of the node; always False with one
        thread)}.

    Raises:
        ValueError: `path` is not an existing file, `num_threads` / `runs` is not a positive int (or
            `num_threads` exceeds `MAX_THREADS`), `input_shape` is missing for a file of dynamic height
            and width, or does not fit it, or an input is not numeric.
        RuntimeError: onnxruntime cannot load the file or run it on the inputs fed, or its profile has
            no node events (a graph without nodes).
    """
    path = check_arguments(path, num_threads, runs, kind=".onnx")
    with tempfile.TemporaryDirectory(prefix="keras_vit_onnx_profile_") as folder:
        session = profiling_session(path, num_threads, os.path.join(folder, "profile"))
        feed = batch1_feed(session, input_shape)
        for _ in range(WARMUP_RUNS + runs):
            run_session(session, feed, path)
        with open(session.end_profiling()) as f:
            events = json.load(f)
    nodes, runs_so_far = {}, {}
    kernel_events = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    for event in sorted(kernel_events, key=lambda e: e["ts"]):
        args = event.get("args", {})
        index = int(args.get("node_index", -1))
        node = nodes.setdefault(index, {"name": event["name"][:-len("_kernel_time")], "op": args.get("op_name", "?"),
                                        "start": event["ts"], "dur": [], "parallel": []})
        node["dur"].append(event["dur"])
        stats = args.get("thread_scheduling_stats", {})
        if isinstance(stats, str):  # some onnxruntime builds write it as a JSON string
            stats = json.loads(stats) if stats.strip() else {}
        ran = False  # num_run is a worker's running count of pieces run: it grew during this node
        for thread, sub in stats.get("sub_threads", {}).items():
            count = int(sub.get("num_run", 0))
            ran |= thread in runs_so_far and count > runs_so_far[thread]
            runs_so_far[thread] = count
        node["parallel"].append(ran)
    if not nodes:
        raise RuntimeError(f"{path}: onnxruntime's profile has no node events")
    out = []
    for index, node in sorted(nodes.items(), key=lambda item: item[1]["start"]):
        counted = slice(WARMUP_RUNS, None) if len(node["dur"]) > WARMUP_RUNS else slice(None)
        parallel = node["parallel"][counted]
        out.append({"index": index, "name": node["name"], "op": node["op"],
                    "ms": float(np.median(node["dur"][counted])) / 1000.0,
                    "parallel": sum(parallel) * 2 >= len(parallel) and num_threads > 1})
    return out
