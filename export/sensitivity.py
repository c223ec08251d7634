"""The int8 file's sensitivity pass (issue 45): the few matrix products whose int8 form costs the decision stay float32.

The CPU `int8` file (`export.litert_quantization`, activations "int8_matmuls") quantises only the inputs and
outputs of its matrix products. When that file's decisive top-1 agreement with the float32 file, on the
calibration images, is under `TARGET`, the pass ranks every int8 matrix product by what it loses: the SNR
(`export.layer_error`) of its float inputs (before their QUANTIZE) minus the SNR of its own output, both against
the float32 file, in dB, on `RANK_IMAGES` images. The top `STEPS[0]`, then `STEPS[1]`, ... are kept in float32
(LiteRT Quantizer's NO_QUANTIZE on their output tensors, the same calibration reused) until the target is met.
This is how the published ViT recipes recover the last points (TinyNeuralNetwork's ViT-B/16: "the two most
sensitive layers in float", -0.5 points; PTQ4ViT and Qualcomm AI Hub keep the sensitive ops out of int8).

The agreement is measured on calibration images (never the verification images, which judge the file) against the
float32 `.tflite` file of the same graph.
"""

import re

import numpy as np

from export.layer_error import runs, snr_db, tensors
from export.runtimes import tflite_invoke
from export.tolerances import compare

TARGET = 0.99  # decisive top-1 agreement with the float32 file on the calibration images (the edge bar, issue 45)
STEPS = (2, 4, 8)  # matrix products kept in float32, tried in turn
CHECK_IMAGES = 100  # calibration images the agreement is measured on
RANK_IMAGES = 4  # images the ranking runs on (every intermediate tensor kept)
MATMULS = ("FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D", "DEPTHWISE_CONV_2D")


def outputs(content, images):
    """The `.tflite` file's (bytes) float32 outputs on `images`, one batch-1 call each (LiteRT, XNNPACK)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=bytes(content), num_threads=1)
    interpreter.allocate_tensors()
    return np.concatenate([tflite_invoke(interpreter, images[i : i + 1]) for i in range(len(images))])


def agreement(reference, content, images, kind):
    """Decisive top-1 agreement of the file (bytes) with `reference` (the float32 file's outputs on `images`)."""
    return compare(reference, outputs(content, images), kind=kind)["decisive_top1_agreement"]


def ranking(float_content, content, images):
    """`[(output tensor name, dB lost)]` of the int8 file's matrix products, the most lost first.

    dB lost: the least SNR of the op's activation inputs (a QUANTIZE's float input where the op reads one) minus
    the SNR of its output, each against the float32 file's tensor of the same name.
    """
    reference, _ = tensors(float_content, images)
    values, ops, details = {}, None, None
    for interpreter, value in runs(content, images):
        if ops is None:
            ops = [op for op in interpreter._get_ops_details() if len(op["outputs"])]
            details = interpreter.get_tensor_details()
        for op in ops:
            for index in op["outputs"]:
                values.setdefault(index, []).append(value(index))
    values = {index: np.stack(v) for index, v in values.items()}
    producer = {op["outputs"][0]: op for op in ops}
    names = {d["index"]: d["name"] for d in details}
    lost = []
    for op in ops:
        out = op["outputs"][0]
        if op["op_name"] not in MATMULS or details[out]["dtype"] != np.int8 or names[out] not in reference:
            continue
        inputs = []
        for index in op["inputs"]:
            source = producer.get(index)
            if source is None:
                continue  # a constant (weights, bias)
            if source["op_name"] == "QUANTIZE":  # the float value before its int8 rounding
                index = source["inputs"][0]
            value = values.get(index)
            if value is not None and names[index] in reference and reference[names[index]][1].shape == value.shape:
                inputs.append(snr_db(reference[names[index]][1], value))
        output = snr_db(reference[names[out]][1], values[out])
        if inputs:
            lost.append((names[out], min(inputs) - output))
    return sorted(lost, key=lambda item: -item[1])


def keep_sensitive_in_float(float_content, content, samples, requantize, kind):
    """The sensitivity pass: `(content, kept)`, the file to ship and the output names of the matrix products kept
    in float32 (`[]` when the first file meets `TARGET`, or for a model without classes, which has no decision).

    Args:
        float_content: bytes of the float32 `.tflite` file of the same graph.
        content: bytes of the int8 file made from it.
        samples: float32 calibration images `(n, h, w, c)`, in the file's input range.
        requantize: `f(keep_float regexes) -> bytes`: the int8 file made again with those ops in float32.
        kind: the file's score kind ("probabilities", "logits", "outputs", "tokens", "features").
    """
    if kind in ("tokens", "features"):
        return content, []
    images = np.asarray(samples[:CHECK_IMAGES], "float32")
    reference = outputs(float_content, images)
    first = agreement(reference, content, images, kind)
    if first >= TARGET:
        return content, []
    order = [name for name, _ in ranking(float_content, content, images[:RANK_IMAGES])]
    best, best_agreement, kept = content, first, []
    for count in STEPS:
        if count > len(order):
            break
        names = order[:count]
        candidate = requantize(tuple(f"^{re.escape(name)};$" for name in names))  # its scope: "name;"
        got = agreement(reference, candidate, images, kind)
        if got > best_agreement:
            best, best_agreement, kept = candidate, got, names
        if got >= TARGET:
            break
    return best, kept
