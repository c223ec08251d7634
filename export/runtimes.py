"""Each artifact run in its own runtime: TensorFlow (SavedModel), LiteRT `ai_edge_litert` with its default XNNPACK
delegate (TFLite), onnxruntime's CPU provider (ONNX); and batch-1 latency there."""

import time

import numpy as np

from export.onnx_quantization import INT8_QUANTIZATIONS

LATENCY_RUNS = 20


def run_artifact(artifact, images):
    """Runs `images` (float32, `(n, h, w, c)`) through the artifact in its runtime; returns float32 outputs."""
    if artifact.format == "onnx" and artifact.quantization in INT8_QUANTIZATIONS:  # as an app calls it
        return _run_onnx(artifact.path, images, one_at_a_time=True)
    runner = {"saved_model": _run_saved_model, "tflite": _run_tflite, "onnx": _run_onnx}[artifact.format]
    return runner(artifact.path, images)


def _saved_model_call(path):
    """The SavedModel's `serving_default` as a function of one image batch (whatever its input is named)."""
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    return lambda images: serve(**{name: tf.constant(images)})["predictions"].numpy()


def _run_saved_model(path, images):
    return _saved_model_call(path)(images)


def _tflite_interpreter(path):
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_path=path, num_threads=1)


def tflite_invoke(interpreter, images):
    """Runs an allocated LiteRT interpreter on float32 `images` `(n, h, w, c)` (resized to that batch if needed);
    an integer input or output is quantised and dequantised with the tensor's scale and zero point.

    Returns:
        float32 outputs `(n, ...)`.
    """
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
    return np.concatenate([tflite_invoke(interpreter, images[i : i + 1]) for i in range(len(images))])


def _run_onnx(path, images, one_at_a_time=False):
    """onnxruntime's outputs; `one_at_a_time`: batch-1 calls, as an app runs them. A quantised file is run so:
    the dynamic int8 file quantises its activations with one scale per call, so an image's scores depend on the
    rest of the batch (docs/traps.md)."""
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name  # "images", or "pixels" for a file that scales raw pixels itself
    if one_at_a_time:
        return np.concatenate([session.run(["predictions"], {name: images[i : i + 1]})[0] for i in range(len(images))])
    return session.run(["predictions"], {name: images})[0]


def latency_ms(artifact, image):
    """Median wall time in ms of one batch-1 call in the artifact's runtime (after one warm-up)."""
    if artifact.format == "tflite":
        interpreter = _tflite_interpreter(artifact.path)
        interpreter.allocate_tensors()
        call = lambda: tflite_invoke(interpreter, image)  # noqa: E731
    elif artifact.format == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(artifact.path, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: image}
        call = lambda: session.run(["predictions"], feed)  # noqa: E731
    else:
        serve = _saved_model_call(artifact.path)
        call = lambda: serve(image)  # noqa: E731
    call()
    times = []
    for _ in range(LATENCY_RUNS):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))
