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
  `benchmark_model` binary in the wheel). Per-op time is measured by
  isolation instead (`op_times`): every op is cut out of the file into a
  one-op model (its tensors, quantisation parameters and constant
  weights), fed the values its inputs take in a real batch-1 run of the
  whole file, and timed alone, on XNNPACK where XNNPACK takes it and on
  the builtin kernels where it does not. The sum leaves out what passing
  data between partitions costs, so it can differ from the whole graph's
  batch-1 latency, which is measured too, with XNNPACK and with builtin
  kernels only (`OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES`).
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

OP_TIME_METHOD = (
    "each op timed alone (a one-op model fed its inputs' values from a batch-1 run of the whole file; XNNPACK "
    "where it takes the op, else the builtin kernel), median of the runs; LiteRT 2.3's Python API has no "
    "profiler. Each figure includes one call's fixed cost, which dominates ops under a microsecond; the sum "
    "leaves out the cost between ops and partitions"
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


def check_arguments(path, num_threads=1, runs=1, kind=".tflite"):
    """`path` as a str after checking the arguments `tflite_profile` and `op_times` share (`kind` names the
    file type in the message; `export.onnx_profile` passes ".onnx").

    Raises:
        ValueError: `path` is not an existing file, or `num_threads` / `runs` is not a positive int;
            the message names the argument and the value received.
    """
    if not isinstance(path, (str, os.PathLike)) or not os.path.isfile(path):
        raise ValueError(f"`path` must be an existing {kind} file. Received: path={path!r}")
    for name, value in (("num_threads", num_threads), ("runs", runs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    return os.fspath(path)


def _op_name(model, op):
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    code = model.operatorCodes[op.opcodeIndex]
    return names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "CUSTOM")


def one_op_models(content, shapes=None):
    """Yields `(op index, op name, input tensor indices, bytes of a .tflite model holding that op alone)`.

    Each one-op model keeps the op, its options and its tensors (types, quantisation parameters, the
    constant weights' buffers); its inputs are the op's non-constant input tensors, its outputs the
    op's outputs. `shapes`: `{tensor index: shape}` to give tensors (a dynamic-batch file's batch-1
    shapes); the original indices of the inputs are yielded so that a caller can feed them.
    """
    import copy

    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf(bytearray(content), 0)
    subgraph = model.subgraphs[0]

    def constant(t):
        data = model.buffers[subgraph.tensors[t].buffer].data
        return data is not None and len(data) > 0

    for index, op in enumerate(subgraph.operators):
        used = list(dict.fromkeys(t for t in [*op.inputs, *op.outputs, *(op.intermediates or [])] if t >= 0))
        remap = {t: i for i, t in enumerate(used)}
        single = schema.ModelT()
        single.version, single.operatorCodes, single.buffers = model.version, model.operatorCodes, [schema.BufferT()]
        tensors = []
        for t in used:
            tensor = copy.copy(subgraph.tensors[t])
            tensor.buffer = 0
            if constant(t):
                single.buffers.append(model.buffers[subgraph.tensors[t].buffer])
                tensor.buffer = len(single.buffers) - 1
            elif shapes is not None and t in shapes:
                tensor.shape, tensor.shapeSignature = list(shapes[t]), None
            tensors.append(tensor)
        alone = copy.copy(op)
        alone.inputs = [remap[t] if t >= 0 else -1 for t in op.inputs]
        alone.outputs = [remap[t] for t in op.outputs]
        alone.intermediates = [remap[t] for t in (op.intermediates or [])]
        graph = schema.SubGraphT()
        graph.tensors, graph.operators = tensors, [alone]
        inputs = list(dict.fromkeys(t for t in op.inputs if t >= 0 and not constant(t)))
        graph.inputs, graph.outputs = [remap[t] for t in inputs], list(alone.outputs)
        single.subgraphs = [graph]
        builder = flatbuffers.Builder(1024)
        builder.Finish(single.Pack(builder), file_identifier=b"TFL3")
        yield index, _op_name(model, op), inputs, bytes(builder.Output())


def tensor_values(path):
    """`{tensor index: value}` of every tensor in one batch-1 run of a `.tflite` file on the builtin kernels.

    The input is `_batch1_input`'s seeded image; LiteRT keeps every intermediate
    (`experimental_preserve_all_tensors`). Values the ops of `one_op_models` are fed, so that each op sees
    what it sees in the whole graph (a LayerNorm's RSQRT gets a positive variance, a softmax real scores).
    """
    from ai_edge_litert.interpreter import OpResolverType

    interpreter, _ = _interpreter(path, 1, experimental_preserve_all_tensors=True,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    index, image = _batch1_input(interpreter)
    interpreter.set_tensor(index, image)
    interpreter.invoke()
    values = {}
    for detail in interpreter.get_tensor_details():
        try:
            values[detail["index"]] = interpreter.get_tensor(detail["index"])
        except ValueError:  # a tensor with no data (optional, or never allocated)
            pass
    return values


def op_times(path, num_threads=1, runs=20):
    """Per-op batch-1 time of a `.tflite` file by isolation: each op timed alone where the whole graph runs it.

    Every op becomes a one-op model (`one_op_models`) fed the values its inputs take in a real batch-1
    run (`tensor_values`), run on XNNPACK when XNNPACK takes the op in the whole file (`_delegated`) and
    on LiteRT's builtin kernels when it does not, with `num_threads` threads; the figure is the median of
    `runs` calls after three warm-up calls. What passing data between ops and partitions costs is not in
    any op's figure; each figure does include one `invoke()` call's fixed cost (under a microsecond on
    this project's machine), which dominates ops that take less, so on a small model the sum can exceed
    the whole graph's latency (the tests' 16 px ViT: 0.062 against 0.026 ms; ViT-Ti/16 int8: 6.64
    against 6.73 ms).

    Args:
        path: a `.tflite` file (one subgraph; any batch signature).
        num_threads: int >= 1, LiteRT's CPU threads.
        runs: int >= 1, timed calls per op.

    Returns:
        A list, one dict per op in file order: {"index", "op", "xnnpack" (bool), "ms" (float,
        milliseconds of wall time: depends on the machine and its load)}.

    Raises:
        ValueError: `path` is not an existing file, or `num_threads` / `runs` is not a positive int.
        RuntimeError: LiteRT cannot load the file, or an op cannot run alone (the message names it and
            LiteRT's reason).
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path = check_arguments(path, num_threads, runs)
    try:
        taken, _ = _delegated(path, num_threads)
    except ValueError as e:  # LiteRT's own "could not load" error
        raise RuntimeError(f"{path}: LiteRT cannot load the file: {e}") from None
    values = tensor_values(path)
    with open(path, "rb") as f:
        content = f.read()
    out = []
    shapes = {t: v.shape for t, v in values.items()}
    for index, name, inputs, single in one_op_models(content, shapes):
        options = {} if index in taken else {
            "experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
        try:
            interpreter = Interpreter(model_content=single, num_threads=num_threads, **options)
            interpreter.allocate_tensors()
            for detail, t in zip(interpreter.get_input_details(), inputs):
                interpreter.set_tensor(detail["index"], values[t])
            times = []
            for i in range(runs + 3):
                start = time.perf_counter()
                interpreter.invoke()
                if i >= 3:
                    times.append(time.perf_counter() - start)
        except (RuntimeError, ValueError, KeyError) as e:
            raise RuntimeError(f"{path}: op {index} ({name}) cannot run alone: {e}") from None
        out.append({"index": index, "op": name, "xnnpack": index in taken, "ms": 1000.0 * float(np.median(times))})
    return out


def tflite_profile(path, num_threads=1, measure_latency=True, runs=20):
    """The op profile of a `.tflite` file as LiteRT (`ai_edge_litert` 2.3) with XNNPACK runs it.

    Args:
        path: str, a `.tflite` file (builtin ops; any batch signature; float
            or integer input).
        num_threads: int >= 1, LiteRT's CPU threads (default 1).
        measure_latency: bool; True measures the batch-1 latency with
            XNNPACK and with builtin kernels only (`graph_latency_ms`),
            and each op's time by isolation (`op_times`).
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
                dtype names as LiteRT's Python API gives them: it shows
                an int4 tensor as int8; `export.litert_quantization.
                quantized_weight_types` reads the flatbuffer's types),
                "xnnpack" (how many XNNPACK takes),
                "off_delegate", "time_ms" (its ops' summed `op_times`,
                ms), "off_delegate_ms" (the part of it off XNNPACK)};
            "off_delegate": one row per op XNNPACK leaves to LiteRT's
                builtin kernels: {"index", "op", "input_types",
                "output_types", "reason", "time_ms"};
            "latency_ms": {"xnnpack", "builtin_kernels", "ops_sum",
                "off_delegate_sum"};
            "op_time": how the op times were measured (`OP_TIME_METHOD`).
            Every time is None when `measure_latency` is False.

    Raises:
        ValueError: `path` is not a file, or `num_threads` / `runs` is not a
            positive int; the message names the argument.
        RuntimeError: LiteRT cannot load the file, or a DELEGATE node matches
            none of its ops.
    """
    path = check_arguments(path, num_threads, runs)
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
    latency = {"xnnpack": None, "builtin_kernels": None, "ops_sum": None, "off_delegate_sum": None}
    for row in rows.values():
        row["off_delegate_ms"] = None
    for row in off:
        row["time_ms"] = None
    if measure_latency:
        latency = {"xnnpack": round(graph_latency_ms(path, num_threads, True, runs), 4),
                   "builtin_kernels": round(graph_latency_ms(path, num_threads, False, runs), 4)}
        times = op_times(path, num_threads, runs)
        for row in rows.values():
            row["time_ms"] = row["off_delegate_ms"] = 0.0
        name = {op["index"]: op["op_name"] for op in ops}  # LiteRT's names, as the rows are keyed
        for t in times:
            rows[name[t["index"]]]["time_ms"] += t["ms"]
            if not t["xnnpack"]:
                rows[name[t["index"]]]["off_delegate_ms"] += t["ms"]
        by_index = {t["index"]: t["ms"] for t in times}
        for row in off:
            row["time_ms"] = round(by_index[row["index"]], 4)
        for row in rows.values():
            row["time_ms"], row["off_delegate_ms"] = round(row["time_ms"], 4), round(row["off_delegate_ms"], 4)
        latency["ops_sum"] = round(sum(by_index.values()), 4)
        latency["off_delegate_sum"] = round(sum(t["ms"] for t in times if not t["xnnpack"]), 4)
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
        "op_time": OP_TIME_METHOD if measure_latency else "not measured (measure_latency=False)",
    }


def off_delegate_summary(profile):
    """`{(op, reason): count}` of the ops a profile says XNNPACK leaves to LiteRT's builtin kernels."""
    return dict(collections.Counter((row["op"], row["reason"]) for row in profile["off_delegate"]))


def format_profile(profile):
    """A profile (see `tflite_profile`) as a short Markdown table plus one line per reason ops leave XNNPACK."""
    latency = profile["latency_ms"]
    timed = latency["ops_sum"] is not None
    head = (f"{profile['file']}: {profile['num_ops']} ops, {profile['xnnpack_ops']} on XNNPACK in "
            f"{profile['xnnpack_partitions']} partitions, {profile['num_threads']} thread(s)")
    if latency["xnnpack"] is not None:
        head += f"; batch-1 latency {latency['xnnpack']:.3f} ms (builtin kernels only: {latency['builtin_kernels']:.3f} ms)"
    if timed:
        head += (f"; ops timed alone: {latency['ops_sum']:.3f} ms, of which off XNNPACK "
                 f"{latency['off_delegate_sum']:.3f} ms")
    if profile["float_ops_in_quantised_graph"]:
        head += f"; {profile['float_ops_in_quantised_graph']} float ops in a quantised graph"
    lines = [head, "| op | count | input types | output types | XNNPACK | off | ms | ms off XNNPACK |",
             "|---|---|---|---|---|---|---|---|"]
    rows = sorted(profile["ops"], key=lambda r: -r["time_ms"]) if timed else profile["ops"]
    for row in rows:
        ms = "n/a" if row["time_ms"] is None else f"{row['time_ms']:.3f}"
        off_ms = "n/a" if row["off_delegate_ms"] is None else f"{row['off_delegate_ms']:.3f}"
        lines.append(f"| {row['op']} | {row['count']} | {','.join(row['input_types'])} | "
                     f"{','.join(row['output_types'])} | {row['xnnpack']} | {row['off_delegate']} | {ms} | {off_ms} |")
    for (op, reason), count in off_delegate_summary(profile).items():
        lines.append(f"off XNNPACK: {count} x {op}: {reason}")
    lines.append(f"per-op time: {profile['op_time']}")
    return "\n".join(lines)
