"""Every op output of a `.tflite` file, run on LiteRT's builtin kernels, and its signal-to-noise ratio against the
float32 file of the same graph: where a quantised file's error enters.

Tensors are matched by name (TensorFlow's converter and LiteRT Quantizer keep the float graph's names); an int8,
uint8 or int16 tensor with one scale is dequantised first. SNR = 10 log10(sum f^2 / sum (f - q)^2) in dB (float32
rounding alone: about 100 dB; each lost bit costs 6 dB). Used by `export.sensitivity` (the int8 file's sensitivity
pass) and `python -m benchmarks.quant_error` (the per-op and per-layer tables).
"""

import collections

import numpy as np


def runs(path, images):
    """Yields `(interpreter, value)` after each image's batch-1 run on the builtin kernels, every intermediate kept;
    `value(index)` is that tensor as float64, dequantised when it is int8 / int16 with one scale. `path`: a
    `.tflite` file's path, or its bytes.

    Raises:
        ValueError: the file does not take float32 images.
    """
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    source = {"model_content": bytes(path)} if isinstance(path, (bytes, bytearray)) else {"model_path": path}
    interpreter = Interpreter(**source, experimental_preserve_all_tensors=True,
                              experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    details = interpreter.get_tensor_details()

    def value(index):
        v = interpreter.get_tensor(index).astype("float64")
        q = details[index]["quantization_parameters"]
        if details[index]["dtype"] in (np.int8, np.uint8, np.int16) and len(q["scales"]) == 1:
            v = (v - q["zero_points"][0]) * q["scales"][0]
        elif details[index]["dtype"] in (np.int8, np.int16, np.int32, np.int64) and len(q["scales"]) > 1:
            # a per-channel weight or bias: one scale per index along quantized_dimension
            shape = [1] * v.ndim
            shape[q["quantized_dimension"]] = len(q["scales"])
            v = (v - q["zero_points"].reshape(shape)) * q["scales"].reshape(shape)
        elif details[index]["dtype"] in (np.int32, np.int64) and len(q["scales"]) == 1 and q["scales"][0] != 0:
            v = (v - q["zero_points"][0]) * q["scales"][0]  # a per-tensor quantised bias
        return v

    if detail["dtype"] != np.float32:
        raise ValueError(f"{path if isinstance(path, str) else 'the file'}: the input must be float32 images. Received: a {np.dtype(detail['dtype']).name} input")
    for image in images:
        interpreter.set_tensor(detail["index"], image[None].astype("float32"))
        interpreter.invoke()
        yield interpreter, value


def tensors(path, images):
    """`({tensor name: (op name, float64 values stacked over images)}, output values)`: every op output and the
    model's output tensor, on the builtin kernels."""
    values, ops, names, output = collections.defaultdict(list), None, None, []
    for interpreter, value in runs(path, images):
        if ops is None:
            ops = [(op["op_name"], op["outputs"][0]) for op in interpreter._get_ops_details() if len(op["outputs"])]
            names = {d["index"]: d["name"] for d in interpreter.get_tensor_details()}
        for _, index in ops:
            values[index].append(value(index))
        output.append(value(interpreter.get_output_details()[0]["index"]))
    return {names[index]: (name, np.stack(values[index])) for name, index in ops}, np.stack(output)


def snr_db(reference, value):
    """10 log10(sum reference^2 / sum (reference - value)^2), capped at 200 dB for equal tensors."""
    noise = float(((reference - value) ** 2).sum())
    return 200.0 if noise == 0 else float(10 * np.log10(max(float((reference ** 2).sum()), 1e-300) / noise))
