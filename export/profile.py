"""Op profile of a `.tflite` file in LiteRT: op types, tensor types, what XNNPACK takes, and why not.

What LiteRT 2.3's Python `Interpreter` (`ai_edge_litert`) exposes, and how
this module uses it:

- `_get_ops_details()` lists the file's ops with their input and output
  tensor types. After `allocate_tensors()` the XNNPACK delegate (applied by
  default) appends one `DELEGATE` node per partition it took; the ops it
  replaced stay in the list, and the execution plan (which says which ones
  run) is not exposed to Python.
- With `experimental_disable_delegate_node_fusion=True` every op XNNPACK
  takes becomes a `DELEGATE` node of its own, with that op's output
  tensors. Matching outputs names each op XNNPACK took; the rest run on
  LiteRT's builtin kernels.
- There is no profiler in the Python API (no per-op timing, no
  `benchmark_model` binary in the wheel): per-op time is reported as
  not available, never estimated. What is measured is the whole graph's
  batch-1 latency with XNNPACK and with builtin kernels only
  (`OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES`).
- XNNPACK does not say why it declines an op. The reason given is read
  from the graph: integer shape arithmetic (int32/int64 tensors only, which
  XNNPACK does not compute), a shape operand computed at run time (XNNPACK
  needs static shapes), or a quantised op it has no kernel or parameters
  for; otherwise "declined" with its types.
"""

import collections
import os
import time

import numpy as np

TIME_NOT_AVAILABLE = (
    "LiteRT 2.3's Python Interpreter has no profiler (no per-op timing API, no benchmark_model binary in the "
    "ai-edge-litert wheel); whole-graph latency with and without XNNPACK is measured instead"
)
_INT_INDEX = ("int32", "int64")
_QUANTISED = ("int8", "uint8", "int16")
_FLOAT = ("float32", "float16")
_QUANTISE_OPS = ("QUANTIZE", "DEQUANTIZE")


def _interpreter(path, num_threads, **options):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=num_threads, **options)
    count = interpreter._interpreter.NumNodes()  # the file's ops, before any delegate node is added
    interpreter.allocate_tensors()
    return interpreter, count


def _dtype_name(dtype):
    return np.dtype(dtype).name


def _delegated(path, num_threads):
    """Indices of the ops XNNPACK takes, and the number of ops in the file.

    With node fusion off every delegated op is one DELEGATE node whose outputs are that op's outputs.
    """
    interpreter, count = _interpreter(path, num_threads, experimental_disable_delegate_node_fusion=True)
    nodes = interpreter._interpreter
    by_outputs = {tuple(nodes.NodeOutputs(i)): i for i in range(count)}
    taken = set()
    for node in range(count, nodes.NumNodes()):
        op = by_outputs.get(tuple(nodes.NodeOutputs(node)))
        if op is None:
            raise RuntimeError(f"{path}: a DELEGATE node matches no op of the file (outputs {nodes.NodeOutputs(node)})")
        taken.add(op)
    return taken, count


def _reason(op, produced):
    """Why XNNPACK did not take `op` (a `_get_ops_details()` entry), read from its tensors."""
    types = op["input_types"] + op["output_types"]
    if op["op_name"] == "SHAPE":
        return "reads a tensor's shape at run time (a dynamic dimension); XNNPACK computes tensor values only"
    if types and all(t in _INT_INDEX for t in types):
        return "integer shape arithmetic (int32/int64 tensors only; XNNPACK computes float and quantised tensors)"
    runtime_shape = [t for t, name in zip(op["inputs"][1:], op["input_types"][1:]) if t in produced and name in _INT_INDEX]
    if runtime_shape:
        return "dynamic shape: its int32 shape operand is computed at run time; XNNPACK needs static shapes"
    if any(t in _QUANTISED for t in types):
        kind = "/".join(sorted({t for t in types if t in _QUANTISED}))
        return (f"quantised ({kind}) {op['op_name']} declined by XNNPACK: no kernel for it, or quantisation "
                "parameters outside its range (the Python API does not say which)")
    return f"declined by XNNPACK for its attributes or shapes ({', '.join(op['input_types'])} -> " \
           f"{', '.join(op['output_types'])}; the Python API does not say which)"


def _batch1_input(interpreter):
    """A seeded batch-1 input in the input tensor's dtype (values in [-1, 1], or the integer range)."""
    detail = interpreter.get_input_details()[0]
    shape = [1, *detail["shape"][1:]]
    if tuple(detail["shape"]) != tuple(shape):
        interpreter.resize_tensor_input(detail["index"], shape)
        interpreter.allocate_tensors()
    rng = np.random.default_rng(0)
    if np.issubdtype(detail["dtype"], np.integer):
        info = np.iinfo(detail["dtype"])
        return detail["index"], rng.integers(info.min, info.max, shape, endpoint=True).astype(detail["dtype"])
    return detail["index"], rng.uniform(-1, 1, shape).astype(detail["dtype"])


def graph_latency_ms(path, num_threads=1, xnnpack=True, runs=20):
    """Median wall time in ms of one batch-1 `invoke()` in LiteRT, after two warm-up calls.

    Args:
        path: a `.tflite` file.
        num_threads: int >= 1, LiteRT's CPU threads.
        xnnpack: bool; False runs LiteRT's builtin kernels only
            (`OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES`).
        runs: int >= 1, timed calls.

    Returns:
        float, milliseconds (wall clock: depends on the machine and its load).
    """
    from ai_edge_litert.interpreter import OpResolverType

    options = {} if xnnpack else {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    interpreter, _ = _interpreter(path, num_threads, **options)
    index, image = _batch1_input(interpreter)
    times = []
    for i in range(runs + 2):
        interpreter.set_tensor(index, image)
        start = time.perf_counter()
        interpreter.invoke()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def tflite_profile(path, num_threads=1, measure_latency=True, runs=20):
    """The op profile of a `.tflite` file as LiteRT (`ai_edge_litert` 2.3) with XNNPACK runs it.

    Args:
        path: str, a `.tflite` file (builtin ops; any batch signature; float
            or integer input).
        num_threads: int >= 1, LiteRT's CPU threads (default 1).
        measure_latency: bool; True measures the batch-1 latency with
            XNNPACK and with builtin kernels only (`graph_latency_ms`).
        runs: int >= 1, timed calls per latency.

    Returns:
        A JSON-ready dict:
            "file": the file name; "num_threads";
            "num_ops": ops in the file; "xnnpack_ops": ops XNNPACK takes;
            "xnnpack_partitions": DELEGATE nodes with node fusion on
                (the partitions the graph runs in);
            "float_ops_in_quantised_graph": in a file with int8/uint8/int16
                activations (an op output), the ops other than QUANTIZE /
                DEQUANTIZE with a float tensor, by `export.tflite.float_ops`
                (so not the scores' float SOFTMAX after the output
                DEQUANTIZE; 0 in a float file and in a dynamic-range file,
                whose activations are float);
            "ops": one row per op type, in order of first appearance:
                {"op", "count", "input_types", "output_types" (sorted
                dtype names), "xnnpack" (how many XNNPACK takes),
                "off_delegate", "time_ms": None};
            "off_delegate": one row per op XNNPACK leaves to LiteRT's
                builtin kernels: {"index", "op", "input_types",
                "output_types", "reason"};
            "latency_ms": {"xnnpack", "builtin_kernels"} (None if not
                measured); "op_time": `TIME_NOT_AVAILABLE`.

    Raises:
        ValueError: `path` is not a file, or `num_threads` / `runs` is not a
            positive int; the message names the argument.
        RuntimeError: LiteRT cannot load the file, or a DELEGATE node matches
            none of its ops.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ValueError(f"`path` must be an existing .tflite file. Received: path={path!r}")
    for name, value in (("num_threads", num_threads), ("runs", runs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    path = os.fspath(path)
    try:
        taken, count = _delegated(path, num_threads)
        interpreter, _ = _interpreter(path, num_threads)
    except ValueError as e:  # LiteRT's own "could not load" error
        raise RuntimeError(f"{path}: LiteRT cannot load the file: {e}") from None
    details = interpreter._get_ops_details()
    partitions = sum(op["op_name"] == "DELEGATE" for op in details[count:])
    ops = [
        {"index": op["index"], "op_name": op["op_name"], "inputs": [int(t) for t in op["inputs"] if t != -1],
         "input_types": [_dtype_name(t) for t in op["operand_types"]],
         "output_types": [_dtype_name(t) for t in op["result_types"]]}
        for op in details[:count]
    ]
    produced = {t for op in ops for t in interpreter._interpreter.NodeOutputs(op["index"])}
    quantised = any(t in _QUANTISED for op in ops for t in op["output_types"])  # quantised activations
    rows, off = {}, []
    for op in ops:
        row = rows.setdefault(op["op_name"], {"op": op["op_name"], "count": 0, "input_types": set(),
                                               "output_types": set(), "xnnpack": 0, "off_delegate": 0, "time_ms": None})
        row["count"] += 1
        row["input_types"].update(op["input_types"])
        row["output_types"].update(op["output_types"])
        if op["index"] in taken:
            row["xnnpack"] += 1
        else:
            row["off_delegate"] += 1
            off.append({"index": op["index"], "op": op["op_name"], "input_types": op["input_types"],
                        "output_types": op["output_types"], "reason": _reason(op, produced)})
    for row in rows.values():
        row["input_types"], row["output_types"] = sorted(row["input_types"]), sorted(row["output_types"])
    float_ops = 0
    if quantised:  # the same rule as the int8 export's check: the output's float softmax after DEQUANTIZE is not counted
        from export.tflite import float_ops as file_float_ops

        with open(path, "rb") as f:
            float_ops = sum(1 for _, name in file_float_ops(f.read()) if name not in _QUANTISE_OPS)
    latency = {"xnnpack": None, "builtin_kernels": None}
    if measure_latency:
        latency = {"xnnpack": round(graph_latency_ms(path, num_threads, True, runs), 4),
                   "builtin_kernels": round(graph_latency_ms(path, num_threads, False, runs), 4)}
    return {
        "file": os.path.basename(path),
        "num_threads": num_threads,
        "num_ops": count,
        "xnnpack_ops": len(taken),
        "xnnpack_partitions": partitions,
        "float_ops_in_quantised_graph": float_ops,
        "ops": list(rows.values()),
        "off_delegate": off,
        "latency_ms": latency,
        "op_time": TIME_NOT_AVAILABLE,
    }


def off_delegate_summary(profile):
    """`{(op, reason): count}` of the ops a profile says XNNPACK leaves to LiteRT's builtin kernels."""
    return dict(collections.Counter((row["op"], row["reason"]) for row in profile["off_delegate"]))


def format_profile(profile):
    """A profile (see `tflite_profile`) as a short Markdown table plus one line per reason ops leave XNNPACK."""
    latency = profile["latency_ms"]
    head = (f"{profile['file']}: {profile['num_ops']} ops, {profile['xnnpack_ops']} on XNNPACK in "
            f"{profile['xnnpack_partitions']} partitions, {profile['num_threads']} thread(s)")
    if latency["xnnpack"] is not None:
        head += f"; batch-1 latency {latency['xnnpack']:.3f} ms (builtin kernels only: {latency['builtin_kernels']:.3f} ms)"
    if profile["float_ops_in_quantised_graph"]:
        head += f"; {profile['float_ops_in_quantised_graph']} float ops in a quantised graph"
    lines = [head, "| op | count | input types | output types | XNNPACK | off |", "|---|---|---|---|---|---|"]
    for row in profile["ops"]:
        lines.append(f"| {row['op']} | {row['count']} | {','.join(row['input_types'])} | "
                     f"{','.join(row['output_types'])} | {row['xnnpack']} | {row['off_delegate']} |")
    for (op, reason), count in off_delegate_summary(profile).items():
        lines.append(f"off XNNPACK: {count} x {op}: {reason}")
    lines.append(f"per-op time: not available ({profile['op_time']})")
    return "\n".join(lines)
