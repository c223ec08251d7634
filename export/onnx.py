"""ONNX export through tf2onnx, checked by the ONNX checker and onnxruntime."""

from keras_vit import _files
from export.signature import INPUT_NAME, OUTPUT_NAME, image_shape, serving_function

DEFAULT_OPSET = 17
# docs/traps.md: tf2onnx leaves these when it cannot convert something; onnxruntime then refuses the file.
FORBIDDEN_OPS = ("Erfc", "PartitionedCall", "StatefulPartitionedCall")


def export_onnx(model, path, opset=DEFAULT_OPSET, include_preprocessing=False, overwrite=False):
    """Converts `model` to an ONNX file with a dynamic batch.

    Converted with `tf2onnx.convert.from_function` from the serving function
    (the route that works for Keras 3 models, docs/traps.md). The graph has input
    `images` float32 `(batch, height, width, channels)` (batch dynamic) and
    output `predictions` float32 `(batch, classes)`. It must pass
    `onnx.checker.check_model(full_check=True)` (standard ONNX ops only, no
    `Erfc` or `PartitionedCall` left-overs) and load in onnxruntime.

    Args:
        model: a built keras_vit model.
        path: `.onnx` file to write (temporary name, then moved).
        opset: ONNX opset, default 17.
        include_preprocessing: bool; True: input raw pixels in [0, 255].
        overwrite: bool, replace an existing `path`.

    Returns:
        `path`.

    Raises:
        ValueError: `opset` is not an int in [13, 18].
        FileExistsError: `path` exists and `overwrite` is False.
        RuntimeError: the converted graph has non-standard ops or
            onnxruntime refuses it; nothing is left at `path`.
    """
    check_opset(opset)
    image_shape(model)
    _files.check_target(path, overwrite)
    import tf2onnx

    serve, spec = serving_function(model, include_preprocessing)
    proto, _ = tf2onnx.convert.from_function(serve, input_signature=[spec], opset=opset)
    _rename_output(proto, OUTPUT_NAME)
    content = proto.SerializeToString()
    check_onnx(content, path)
    with _files.staged(path, overwrite) as tmp:
        with open(tmp, "wb") as f:
            f.write(content)
    return path


def check_opset(opset):
    """Raises ValueError unless `opset` is an int in [13, 18], the range tf2onnx 1.17 writes."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not 13 <= opset <= 18:
        raise ValueError(f"`opset` must be an int in [13, 18] (tf2onnx 1.17). Received: opset={opset!r}")


def _rename_output(proto, name):
    """Gives the graph's single output a stable name."""
    old = proto.graph.output[0].name
    if old == name:
        return
    for node in proto.graph.node:
        node.output[:] = [name if o == old else o for o in node.output]
        node.input[:] = [name if i == old else i for i in node.input]
    proto.graph.output[0].name = name


def check_onnx(content, name="model"):
    """Raises RuntimeError unless the ONNX bytes pass the checker and load in onnxruntime."""
    import onnx
    import onnxruntime

    proto = onnx.load_from_string(content)
    bad = sorted({n.op_type for n in proto.graph.node if n.op_type in FORBIDDEN_OPS})
    if bad:
        raise RuntimeError(f"{name}: tf2onnx left unconverted ops {bad}; onnxruntime cannot run them")
    try:
        onnx.checker.check_model(proto, full_check=True)
        onnxruntime.InferenceSession(content, providers=["CPUExecutionProvider"])
    except Exception as e:  # checker or runtime refused the graph
        raise RuntimeError(f"{name}: the ONNX graph is invalid or onnxruntime refuses it: {str(e)[:500]}") from None
    inputs = [i.name for i in proto.graph.input]
    if inputs != [INPUT_NAME]:
        raise RuntimeError(f"{name}: expected one input named {INPUT_NAME!r}, found {inputs}")
