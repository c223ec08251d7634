"""Run each artifact in its own runtime and compare it with the Keras model.

Runtimes: TensorFlow (SavedModel), LiteRT `ai_edge_litert` with its default
XNNPACK delegate (TFLite), onnxruntime's CPU provider (ONNX).
"""

import dataclasses
import os
import time

import numpy as np

# Tolerances per quantization mode, enforced by `verify`. Reasons:
# - float32: the same float32 maths, reordered by each runtime; on the demo ViT the measured
#   max |diff| of logits is ~1e-6 (TFLite, ONNX, SavedModel), so 1e-4 leaves ample room and still
#   catches a wrong weight, layout or GELU form (tanh vs exact differ by up to 4.7e-4 per activation).
# - float16: weights rounded to 10-bit mantissas; docs/traps.md reports logit drift of 0.03-0.16 on
#   attention models, so only the decision is bounded: top-1 agreement >= 99%.
# - dynamic_int8: int8 weights, activations quantised per batch at run time: top-1 agreement >= 98%.
# - int8: full-integer; LayerNorm, Softmax and GELU are sensitive (docs/traps.md): top-1 agreement
#   >= 97% and, with labels, an accuracy drop under 2 points.
TOLERANCES = {
    "float32": {"max_abs_diff": 1e-4},
    "float16": {"top1_agreement": 0.99},
    "dynamic_int8": {"top1_agreement": 0.98},
    "int8": {"top1_agreement": 0.97, "accuracy_drop": 0.02},
}
LATENCY_RUNS = 20


@dataclasses.dataclass
class Artifact:
    """One exported file: `format` is "saved_model", "tflite" or "onnx"."""

    name: str
    format: str
    path: str
    quantization: str = "float32"
    include_preprocessing: bool = False


class VerificationError(RuntimeError):
    """An artifact's outputs are outside its tolerance; names the artifact and the figure."""


def run_artifact(artifact, images):
    """Runs `images` (float32, `(n, h, w, c)`) through the artifact in its runtime; returns float32 outputs."""
    runner = {"saved_model": _run_saved_model, "tflite": _run_tflite, "onnx": _run_onnx}[artifact.format]
    return runner(artifact.path, images)


def _run_saved_model(path, images):
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    return serve(images=tf.constant(images))["predictions"].numpy()


def _tflite_interpreter(path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=1)


def _tflite_invoke(interpreter, images):
    inp = interpreter.get_input_details()[0]
    out = interpreter.get_output_details()[0]
    if tuple(inp["shape"]) != images.shape:
        interpreter.resize_tensor_input(inp["index"], list(images.shape))
        interpreter.allocate_tensors()
        inp = interpreter.get_input_details()[0]
        out = interpreter.get_output_details()[0]
    x = images
    if inp["dtype"] != np.float32:
        scale, zero = inp["quantization"]
        info = np.iinfo(inp["dtype"])
        x = np.clip(np.round(images / scale + zero), info.min, info.max).astype(inp["dtype"])
    interpreter.set_tensor(inp["index"], x)
    interpreter.invoke()
    y = interpreter.get_tensor(out["index"])
    if out["dtype"] != np.float32:
        scale, zero = out["quantization"]
        y = (y.astype("float32") - zero) * scale
    return y.astype("float32")


def _run_tflite(path, images):
    interpreter = _tflite_interpreter(path)
    interpreter.allocate_tensors()
    return np.concatenate([_tflite_invoke(interpreter, images[i : i + 1]) for i in range(len(images))])


def _run_onnx(path, images):
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(["predictions"], {"images": images})[0]


def latency_ms(artifact, image):
    """Median wall time in ms of one batch-1 call in the artifact's runtime (after one warm-up)."""
    if artifact.format == "tflite":
        interpreter = _tflite_interpreter(artifact.path)
        interpreter.allocate_tensors()
        call = lambda: _tflite_invoke(interpreter, image)  # noqa: E731
    elif artifact.format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(artifact.path, providers=["CPUExecutionProvider"])
        call = lambda: session.run(["predictions"], {"images": image})  # noqa: E731
    else:
        import tensorflow as tf

        serve = tf.saved_model.load(artifact.path).signatures["serving_default"]
        tensor = tf.constant(image)
        call = lambda: serve(images=tensor)  # noqa: E731
    call()
    times = []
    for _ in range(LATENCY_RUNS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def compare(reference, outputs, labels=None):
    """Figures of `outputs` against `reference` (both `(n, classes)`).

    Returns a dict: max_abs_diff, mean_abs_diff, cosine (mean over examples
    of the cosine similarity of the two output vectors), top1_agreement, and
    with labels accuracy, keras_accuracy and accuracy_drop (keras - artifact).
    """
    diff = np.abs(outputs.astype("float64") - reference.astype("float64"))
    dot = (outputs * reference).sum(-1)
    norms = np.linalg.norm(outputs, axis=-1) * np.linalg.norm(reference, axis=-1)
    cosine = np.where(norms > 0, dot / np.maximum(norms, 1e-30), 1.0)
    figures = {
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "cosine": float(cosine.mean()),
        "top1_agreement": float((outputs.argmax(-1) == reference.argmax(-1)).mean()),
    }
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        figures["accuracy"] = float((outputs.argmax(-1) == labels).mean())
        figures["keras_accuracy"] = float((reference.argmax(-1) == labels).mean())
        figures["accuracy_drop"] = figures["keras_accuracy"] - figures["accuracy"]
    return figures


def failures(figures, quantization):
    """Returns the list of "figure value vs limit" strings that break the tolerance."""
    broken = []
    for key, limit in TOLERANCES[quantization].items():
        if key not in figures:
            continue
        value = figures[key]
        bad = value > limit if key in ("max_abs_diff", "accuracy_drop") else value < limit
        if bad:
            relation = "<=" if key in ("max_abs_diff", "accuracy_drop") else ">="
            broken.append(f"{key} = {value:.6g} (needs {relation} {limit})")
    return broken


def verify(model, artifacts, images, labels=None, raise_on_failure=True, measure_latency=True):
    """Verifies each artifact against the Keras model on the same images.

    Args:
        model: the Keras model the artifacts were exported from.
        artifacts: list of `Artifact`.
        images: float32 `(n, height, width, channels)` scaled to [-1, 1] (the
            Keras model's input); artifacts built with
            `include_preprocessing` are given (images + 1) * 127.5, raw pixels.
        labels: optional int `(n,)` class indices, for accuracy.
        raise_on_failure: bool, default True.
        measure_latency: bool, default True: median batch-1 latency.

    Returns:
        A list of dicts, one per artifact: name, format, quantization, path,
        size_mb, the `compare` figures, latency_ms_batch1, tolerance,
        passed, failures.

    Raises:
        VerificationError: with `raise_on_failure`, when any artifact fails a
            tolerance or cannot run; the message names each failing artifact
            and figure.
    """
    images = np.asarray(images, dtype="float32")
    reference = np.asarray(model.predict(images, verbose=0), dtype="float32")
    results = []
    for artifact in artifacts:
        inputs = (images + 1.0) * 127.5 if artifact.include_preprocessing else images
        row = {
            "name": artifact.name,
            "format": artifact.format,
            "quantization": artifact.quantization,
            "path": artifact.path,
            "size_mb": _size_mb(artifact.path),
            "tolerance": TOLERANCES[artifact.quantization],
        }
        try:
            outputs = run_artifact(artifact, inputs)
            row.update(compare(reference, outputs, labels))
            row["failures"] = failures(row, artifact.quantization)
            if measure_latency:
                row["latency_ms_batch1"] = latency_ms(artifact, inputs[:1])
        except Exception as e:  # the runtime refused the artifact: that is a failed verification
            row["failures"] = [f"cannot run in its runtime: {type(e).__name__}: {str(e)[:300]}"]
        row["passed"] = not row["failures"]
        results.append(row)
    failed = [f"{r['name']}: {'; '.join(r['failures'])}" for r in results if not r["passed"]]
    if failed and raise_on_failure:
        raise VerificationError("verification failed for " + " | ".join(failed))
    return results


def _size_mb(path):
    if os.path.isdir(path):
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    else:
        total = os.path.getsize(path)
    return total / 1e6
