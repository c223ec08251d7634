"""Full-integer int8 TFLite graphs in the form XNNPACK's QS8 kernels take: symmetric matmul operands.

TensorFlow 2.21's int8 converter quantises every activation asymmetrically
(its own zero point, from the calibrated min and max). LiteRT 2.3's XNNPACK
delegate takes an int8 `BATCH_MATMUL` only when its second operand has zero
point 0 (`VisitBatchMatMulNode` in tensorflow/lite/delegates/xnnpack/
xnnpack_delegate.cc checks that operand as it checks channelwise-int8
weights, `CheckTensorFloat32OrQCInt8Type`; the zero-point rule was found on
LiteRT 2.3's files: zero point 0 taken, every other declined). In a ViT both attention matmuls, q . k^T and softmax(.) . v, have
an activation as second operand, so XNNPACK declined 23 of ViT-Ti/16's 24
(the one taken had a calibrated zero point of exactly 0), and LiteRT's
builtin int8 BATCH_MATMUL ran them: 32 of the int8 file's 38 ms
(benchmarks/findings/int8-symmetric-matmul.md).

`symmetric_matmul_operands` changes the graph, not the runtime: it gives the
second operand of every int8 `BATCH_MATMUL` symmetric quantisation
parameters (zero point 0, scale max(|min|, |max|) / 127 of the range the
calibration chose, so that range stays representable), together with every
tensor joined to it through ops that copy int8 values without requantising
(`RESHAPE`, `TRANSPOSE`, `SQUEEZE`, `EXPAND_DIMS`), back to the op that
produces it (a `FULLY_CONNECTED` in a ViT), which requantises its output to
whatever parameters its output tensor holds. The values are the same up to
the coarser step: at most one bit of resolution on those tensors (the step
grows by the factor range / (2 max(|min|, |max|)), at most 2).
"""

import numpy as np

# Ops whose int8 kernels copy values: input and output must hold the same quantisation parameters.
PASS_THROUGH = ("RESHAPE", "TRANSPOSE", "SQUEEZE", "EXPAND_DIMS")
# Ops whose int8 output is requantised from their output tensor's parameters: free to take new ones.
REQUANTISING = ("FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL", "MEAN")


def _op_names(model):
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    return [names.get(max(c.BuiltinCode(), c.DeprecatedBuiltinCode()), "UNKNOWN") for c in codes]


def _component(subgraph, names, start):
    """Tensors joined to `start` through pass-through ops, and the ops producing them from outside, or None.

    None: the group reaches a graph input or output, a constant, or is produced
    by an op that cannot take new output parameters.
    """
    producers, consumers = {}, {}
    for i in range(subgraph.OperatorsLength()):
        op = subgraph.Operators(i)
        for t in op.InputsAsNumpy():
            consumers.setdefault(int(t), []).append(i)
        for t in op.OutputsAsNumpy():
            producers[int(t)] = i
    graph_io = set(subgraph.InputsAsNumpy().tolist()) | set(subgraph.OutputsAsNumpy().tolist())
    seen, todo = set(), [start]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        if t in graph_io or t not in producers:  # graph I/O or a constant: parameters fixed from outside
            return None
        seen.add(t)
        op = subgraph.Operators(producers[t])
        name = names[op.OpcodeIndex()]
        if name in PASS_THROUGH:
            todo.append(int(op.InputsAsNumpy()[0]))
        elif name not in REQUANTISING:
            return None
        for i in consumers.get(t, []):
            consumer = subgraph.Operators(i)
            if names[consumer.OpcodeIndex()] in PASS_THROUGH and int(consumer.InputsAsNumpy()[0]) == t:
                todo.extend(int(o) for o in consumer.OutputsAsNumpy())
    return seen


def symmetric_matmul_operands(content):
    """Returns a copy of an int8 `.tflite` flatbuffer whose BATCH_MATMUL second operands have zero point 0.

    See the module docstring for why (XNNPACK declines an int8 BATCH_MATMUL
    with an asymmetric second operand) and what changes. Only quantisation
    parameters are rewritten, in place in a copy of the bytes (the same size,
    ops, weights and metadata). An operand already symmetric, per-channel,
    not int8, or whose group of tensors (see `_component`) reaches a graph
    input or output, a constant or an op with fixed output parameters (e.g.
    SOFTMAX) is left as it is.

    Args:
        content: bytes of a `.tflite` file (any quantisation; a file without
            int8 BATCH_MATMUL comes back unchanged).

    Returns:
        `(bytes, changed)`: the new flatbuffer and the number of tensors
        whose parameters were rewritten.

    Raises:
        ValueError: `content` is not bytes of a TFLite flatbuffer; the
            message names the argument.
    """
    from ai_edge_litert import schema_py_generated as schema

    if not isinstance(content, (bytes, bytearray)) or len(content) < 8 or bytes(content[4:8]) != b"TFL3":
        raise ValueError(f"`content` must be the bytes of a .tflite file (identifier 'TFL3'). "
                         f"Received: content of type {type(content).__name__}")
    data = bytearray(content)
    model = schema.Model.GetRootAs(data, 0)
    names = _op_names(model)
    int8 = schema.TensorType.INT8
    changed = 0
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for i in range(subgraph.OperatorsLength()):
            op = subgraph.Operators(i)
            if names[op.OpcodeIndex()] != "BATCH_MATMUL":
                continue
            operand = int(op.InputsAsNumpy()[1])
            q = subgraph.Tensors(operand).Quantization()
            if (subgraph.Tensors(operand).Type() != int8 or q is None or q.ScaleLength() != 1
                    or q.ZeroPointLength() != 1 or q.ZeroPoint(0) == 0):
                continue
            group = _component(subgraph, names, operand)
            if group is None:
                continue
            scale, zero = float(q.Scale(0)), int(q.ZeroPoint(0))
            bound = max(scale * (128 + zero), scale * (127 - zero))  # max(|min|, |max|) of the int8 range
            for t in group:
                tq = subgraph.Tensors(t).Quantization()
                if tq.ScaleLength() != 1 or tq.ScaleAsNumpy()[0] != scale or tq.ZeroPointAsNumpy()[0] != zero:
                    break  # the group disagrees about its parameters: not a pure copy chain, leave it
            else:
                for t in group:
                    tq = subgraph.Tensors(t).Quantization()
                    tq.ScaleAsNumpy()[0] = np.float32(bound / 127.0)  # views into `data`
                    tq.ZeroPointAsNumpy()[0] = 0
                    changed += 1
    return bytes(data), changed
