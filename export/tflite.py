"""TFLite export: float32, float16, dynamic-range int8 and full-integer int8 (TensorFlow's converter);
int16x8, weight-only int8 and int4 (LiteRT Quantizer, `export.litert_quantization`)."""

import os
import sys
import warnings

import numpy as np

from keras_vit.common import files as _files
from keras_vit.layers.classifier_head import check_class_names
from export.litert_quantization import missing_package, quantize_with_ranges
from export.modes import FLOAT32, TFLITE, TFLITE_REFUSED, names
from export.images import representative_samples
from export.input_range import UNIT, scale
from export.reparameterize import balanced_graph
from export.scores import CLASSLESS, describe_output
from export.sensitivity import keep_sensitive_in_float
from export.signature import ServingGraph, prepare
from export.sizes import parse_image_size
from export.verify import Artifact, check_artifact, verification_images

# The modes' records (`export.modes.TFLITE`): TensorFlow's converter makes its own (and `keras-vit-export` makes the
# defaults); LiteRT Quantizer quantises the float32 file of the same graph into the others
# (`export.litert_quantization`).
TF_QUANTIZATIONS = names("tflite", converter="tensorflow")
QUANTIZATIONS = tuple(TFLITE)
DEFAULT_QUANTIZATIONS = names("tflite", default=True)
# Modes calibrated on the representative data (the same images for all).
CALIBRATED = tuple(m for m in QUANTIZATIONS if TFLITE[m].calibrated)
IO_TYPES = tuple(dict.fromkeys(t for m in TFLITE.values() for t in m.io_types))
# Names this stack refuses, with the reason (`export.modes.TFLITE_REFUSED`).
REFUSED = dict(TFLITE_REFUSED)
# Modes that make a .tflite file of dynamic height and width (`image_size="dynamic"`, a model of any resolution), and
# why the others are refused. Measured on the tests' tiny ViT (TF 2.21, LiteRT 2.3): float32, float16 and dynamic_int8
# files converted from a (batch, None, None, C) signature run after `resize_tensor_input` at 16 and 24 px and match
# Keras within their bars; the int8 converter leaves 4 float CASTs and 4 QUANTIZE ops on the run-time resampling of
# the position table (shape arithmetic in float), so the file is not integer-only (docs/traps.md).
DYNAMIC_SIZE_QUANTIZATIONS = names("tflite", dynamic_size="")
DYNAMIC_SIZE_REFUSED = {m.name: m.dynamic_size for m in TFLITE.values() if m.dynamic_size}


def check_dynamic_size_quantization(quantization):
    """Raises ValueError, with the measured reason, unless `quantization` makes a dynamic-size .tflite file."""
    if quantization not in DYNAMIC_SIZE_QUANTIZATIONS:
        reason = DYNAMIC_SIZE_REFUSED.get(quantization, "not measured on a file of dynamic height and width")
        raise ValueError(
            f"quantization={quantization!r} with image_size='dynamic' is refused: {reason}. Dynamic-size .tflite "
            f"files are made in {', '.join(DYNAMIC_SIZE_QUANTIZATIONS)}; export {quantization!r} at a fixed "
            "image_size (--image-size H,W)"
        )


def check_quantization(quantization, io_type="float32"):
    """Raises ValueError for an unknown or refused mode, or one whose package is missing, before any conversion.

    Raises:
        ValueError: `quantization` not in `QUANTIZATIONS` (or refused);
            `io_type` not in `IO_TYPES`, or not "float32" for a mode whose
            record does not take it (`Mode.io_types`); a LiteRT Quantizer mode without `litert-quantizer`
            installed (the message names the package and the pip command).
    """
    if quantization in REFUSED:
        raise ValueError(f"quantization={quantization!r} is refused: {REFUSED[quantization]}. Use one of {QUANTIZATIONS}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"`quantization` must be one of {', '.join(QUANTIZATIONS)}. Received: quantization={quantization!r}")
    if io_type not in IO_TYPES:
        raise ValueError(f"`io_type` must be one of {', '.join(IO_TYPES)}. Received: io_type={io_type!r}")
    if io_type not in TFLITE[quantization].io_types:
        takers = " or ".join(repr(m.name) for m in TFLITE.values() if io_type in m.io_types)
        raise ValueError(
            f"io_type={io_type!r} needs quantization={takers} (full-integer); "
            f"Received: quantization={quantization!r}"
        )
    missing = missing_package(quantization)
    if missing:
        raise ValueError(missing)


def _strip_location(text):
    """Drops MLIR's leading `loc(...)` (nested parentheses) and the colon after it."""
    while text.startswith("loc("):
        depth = 0
        for i, char in enumerate(text[3:], start=3):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                text = text[i + 1 :].lstrip(": ").strip()
                break
        else:
            break
    if "error:" in text:
        text = text.split("error:", 1)[1].strip()
    return text


def export_tflite(
    model,
    path,
    quantization="float32",
    representative_data=None,
    io_type="float32",
    metadata=None,
    include_preprocessing=False,
    batch_size=1,
    overwrite=False,
    progress=True,
    verify=True,
    verification_data=None,
    scores=None,
    image_size=None,
    input_range=None,
):
    """Converts `model` to a `.tflite` file with builtin ops only, verified before it lands.

    Route (docs/traps.md): the model's float32 serving graph
    (`export.signature.ServingGraph`: a model trained under a mixed or
    low-precision dtype policy is exported as its float32 twin) is written
    as a SavedModel with Keras' `ExportArchive`, then
    `tf.lite.TFLiteConverter.from_saved_model` converts it. By default the
    batch is fixed at 1 (what phones run): on ViT-Ti/16 a dynamic batch adds
    253 ops (152 of them SHAPE, GATHER, REDUCE_PROD and PACK on int32 shape
    values), 229 of which XNNPACK leaves to LiteRT's builtin kernels, and
    splits the float32 graph into 52 XNNPACK partitions instead of 2
    (`export.profile`, benchmarks/findings/tflite-batch.md). `batch_size=None` gives a
    dynamic batch: the input is `(1, h, w, c)` and can be resized to any
    batch with `resize_tensor_input`. The file is loaded in LiteRT
    (`ai_edge_litert`) and its op list checked: a Select-TF (Flex) or custom
    op makes the export fail. Then, unless `verify=False`, it is run in
    LiteRT against the float32 model on `verification_data` (default: the
    calibration images for a calibrated mode, else a seeded batch of noise) with the
    tolerances of `export.tolerances.TOLERANCES`; only a file that passes is
    moved to `path`.

    A model of any resolution (`input_shape=(None, None, C)`) gives a file
    of fixed size: `image_size`, by default its position table's grid times
    the patch size (`export.signature.default_image_size`). With
    `image_size="dynamic"` the file keeps a dynamic height and width (the
    input reads `(1, 1, 1, C)`; `resize_tensor_input` to any multiple of the
    patch size, then `allocate_tensors`); it is verified at two sizes, and
    made in `DYNAMIC_SIZE_QUANTIZATIONS` only (int8 is refused: it is not
    integer-only, see `DYNAMIC_SIZE_REFUSED`).

    Quantisation modes (TensorFlow's post-training quantisation):
        "float32": no quantisation.
        "float16": float16 weights, float32 compute and I/O.
        "dynamic_int8": int8 weights, activations quantised on the fly,
            after the exact LayerNorm rewrite from the weights alone.
        "full_integer_int8": every op int8 (for NPUs), calibrated on
            `representative_data`; `io_type` "float32" (quantize/dequantize
            in the graph), "int8" or "uint8" input and output.
    LiteRT Quantizer's modes (`export.litert_quantization`; package
    `litert-quantizer`), made from the float32 file of the same graph:
        "int8": the phone-CPU file: int8 matrix products (symmetric
            activations) calibrated on `representative_data`, float32
            LayerNorms, softmax, GELU and residual adds, after the exact
            LayerNorm rewrite; the sensitivity pass keeps the few matrix
            products int8 costs most in float32 (`export.sensitivity`);
            float32 I/O.
        "int8_mixed16": integer-only, int8 matrix products with int16
            LayerNorms, residual adds and softmax, calibrated like "int8",
            after an exact LayerNorm reparameterisation; float32 I/O
            (`export.litert_quantization`).
        "int16x8": int8 weights, int16 activations, calibrated on
            `representative_data` like "int8"; float32 I/O.
        "weight_only_int8": int8 weights, float32 compute.
        "weight_only_int4": int4 weights (per output channel), float32
            compute.
        "dynamic_int4": int4 weights (per output channel), activations
            quantised to int8 on the fly (XNNPACK).
    "16x8" is refused with a ValueError naming "int16x8" (see `REFUSED`).

    Args:
        model: a built keras_vit model (any dtype policy), or an
            `export.signature.ServingGraph` of one.
        path: `.tflite` file to write (temporary name, then moved).
        quantization: one of `QUANTIZATIONS`.
        representative_data: calibration images for the calibrated modes (`CALIBRATED`); see
            `representative_samples` (tf.data, NumPy or image folder).
        io_type: "float32" (default), "int8" or "uint8" (full_integer_int8 only).
        metadata: None, or a dict for `export.metadata.write_metadata`
            (key `labels`: the list of class names, one per model output;
            `scores`: default the graph's). `{}` takes the class names the
            model's head carries (`keras_vit.layers.model_class_names`).
        include_preprocessing: bool; True: the input, named `pixels`, is raw
            pixels in [0, 255] and the scaling to the model's range is in the
            graph.
        batch_size: 1 (default, fixed batch 1) or None (dynamic batch).
        overwrite: bool, replace an existing `path`.
        progress: bool, show a Keras progress bar while calibrating (on a
            terminal only).
        verify: bool, default True; False skips the numeric check (the
            structural checks always run).
        verification_data: images in the range the Keras model takes, to
            verify on (same forms as `representative_data`); default: see above.
        scores: None (default: "probabilities", or the graph's own when
            `model` is a `ServingGraph`), "probabilities" (a softmax in the
            graph when the head has no activation) or "logits".
        image_size: None, (height, width) in pixels (a model of any
            resolution, or a fixed-size model's own size) or "dynamic"; see
            above and `export.sizes.parse_image_size`.
        input_range: None (default: read from the model's first layers,
            `export.input_range.model_input_range`) or the range the model
            takes, one of `export.input_range.RANGES` ("-1,1", "0,1", "0,255").

    Returns:
        `path`.

    Raises:
        ValueError: a bad `image_size` (not a multiple of the patch size, a
            fixed-size model's other size, "dynamic" for a fixed-size model
            or with a mode outside `DYNAMIC_SIZE_QUANTIZATIONS`);
            unknown or refused quantization or io_type; a calibrated mode
            without, or with empty, representative data; a
            LiteRT Quantizer mode without `litert-quantizer` installed; a
            model Keras quantised itself; `metadata` labels that are not one
            per model output, or none at all (neither given nor in the model).
        FileExistsError: `path` exists and `overwrite` is False.
        RuntimeError: the conversion fails (the message's first line says
            why), or the converted file uses non-builtin (Flex/custom) ops or
            does not load in LiteRT, or an integer-only file has a float op
            (`check_integer_only`); nothing is left at `path`.
        export.verify.VerificationError: the file's outputs are outside the
            mode's tolerance; nothing is left at `path`.
    """
    check_quantization(quantization, io_type)
    if batch_size not in (None, 1):
        raise ValueError(f"`batch_size` must be None (dynamic) or 1. Received: batch_size={batch_size!r}")
    if batch_size is None and not TFLITE[quantization].dynamic_batch:  # measured, e.g. float SHAPE ops left
        raise ValueError(f"quantization={quantization!r} needs batch_size=1: {TFLITE[quantization].batch_refused}. "
                         "Received: batch_size=None")
    size = parse_image_size(image_size, model.model if isinstance(model, ServingGraph) else model)
    if size == "dynamic":
        check_dynamic_size_quantization(quantization)
    graph, owned = prepare(model, include_preprocessing, batch_size, scores, image_size=None if size == "dynamic" else size,
                           dynamic_size=size == "dynamic", input_range=input_range)
    try:
        if metadata is not None:
            metadata = _checked_metadata(metadata, graph)
        samples = None
        if quantization in CALIBRATED:
            if representative_data is None:
                raise ValueError(f"quantization={quantization!r} needs representative_data (calibration images)")
            samples = representative_samples(representative_data, graph.image_shape, include_preprocessing,
                                             input_range=graph.input_range)
        check_images = None
        if verification_data is not None:
            check_images = scale(verification_images(verification_data, graph.image_shape, graph.model_range), graph.model_range, UNIT)
        elif samples is not None:  # real images when there are: calibration images, back in [-1, 1]
            check_images = scale(samples[:64], graph.input_range, UNIT)
        _files.check_target(path, overwrite)
        content = convert(graph, quantization, samples, io_type, progress, name=path)
        if metadata is not None:
            from export.metadata import write_metadata

            default_size = graph.image_shape[:2] if graph.dynamic_size else None
            content = write_metadata(content, include_preprocessing=include_preprocessing, default_size=default_size,
                                     input_range=graph.input_range, **metadata)
        with _files.staged(path, overwrite) as tmp:
            with open(tmp, "wb") as f:
                f.write(content)
            if verify:
                artifact = Artifact(os.path.basename(path), "tflite", tmp, quantization, include_preprocessing,
                                    dynamic_size=graph.dynamic_size, input_range=graph.input_range)
                check_artifact(graph, artifact, check_images)
    finally:
        if owned:
            graph.close()
    return path


def _checked_metadata(metadata, graph):
    """`metadata` with its labels checked against the graph's outputs (or taken from the model) and its scores set.

    Raises:
        ValueError: `metadata` is not a dict; labels that are not one per
            output; no labels given and none in the model.
    """
    if not isinstance(metadata, dict):
        raise ValueError(f"`metadata` must be None or a dict such as {{'labels': [...]}}. Received: {metadata!r}")
    metadata = dict(metadata)
    labels = metadata.get("labels")
    if graph.score_kind in CLASSLESS:  # no classes to name: the metadata describes the input and the output
        if labels is not None:
            raise ValueError(f"`metadata['labels']` names classes, and the model outputs "
                             f"{describe_output(graph.score_kind)}: leave the labels "
                             f"out. Received: {len(list(labels))} labels")
        metadata["labels"] = None
        metadata.setdefault("scores", graph.score_kind)
        return metadata
    if labels is None:
        labels = graph.class_names
        if labels is None:
            raise ValueError(f"`metadata` needs 'labels', one class name per model output ({graph.classes}): the "
                             "model's head carries no class names (build it with class_names=...)")
    if isinstance(labels, (str, bytes)) or len(list(labels)) != graph.classes:
        count = "a string" if isinstance(labels, (str, bytes)) else f"{len(list(labels))} labels"
        raise ValueError(f"`metadata['labels']` must name each of the model's {graph.classes} outputs; MediaPipe "
                         f"refuses a file whose label count differs. Received: {count}")
    metadata["labels"] = check_class_names([str(label) for label in labels], graph.classes, "metadata['labels']")
    metadata.setdefault("scores", graph.score_kind)
    return metadata


def convert(graph, quantization="float32", samples=None, io_type="float32", progress=True, name="model"):
    """Converts a `ServingGraph`'s SavedModel to TFLite flatbuffer bytes with builtin ops only.

    Args:
        graph: an `export.signature.ServingGraph`.
        quantization: one of `QUANTIZATIONS`.
        samples: float32 calibration images `(n, h, w, c)` for the calibrated
            modes (in the artifact's input scale).
        io_type: "float32", "int8" or "uint8" (int8 only).
        progress: bool, calibration progress bar on a terminal.
        name: the artifact's name, for messages.

    Raises:
        RuntimeError: the converter (or LiteRT Quantizer) fails; the message
            starts with one line that says why (the converter's first
            error), the full converter output follows; or the file has
            non-builtin ops; or an integer-only file ("full_integer_int8",
            "int8_mixed16") has a float op (`check_integer_only`).
    """
    mode = TFLITE[quantization]
    source, owned = graph, False
    if mode.balance_layer_norms:  # RepQ-ViT's exact LayerNorm rewrite first, proven exact on the float model:
        # measured on the calibration images in a calibrated mode, from the LayerNorms' weights alone in the others
        source, owned = balanced_graph(graph, samples if mode.calibrated else None)
    try:
        if quantization == FLOAT32 and io_type == "float32":  # one conversion a graph (`ServingGraph.float32_tflite`)
            if source.float32_tflite is None:
                source.float32_tflite = _tensorflow_convert(source, mode, samples, io_type, progress, name)
            return source.float32_tflite
        if mode.converter != "litert_quantizer":
            # TensorFlow's converter, set from the record: float16 weights; int8 weights with dynamic activations;
            # or every tensor int8, calibrated (builtin int8 ops only)
            return _tensorflow_convert(source, mode, samples, io_type, progress, name)
        # LiteRT Quantizer quantises TensorFlow's float32 file of the same graph
        float_content = convert(source, FLOAT32, name=name)
    finally:
        if owned:
            source.close()
    content, ranges = quantize_with_ranges(float_content, quantization, samples, name=name, progress=progress)
    if mode.activations == "int8_matmuls":  # the sensitivity pass: the few matmuls int8 costs most stay float32
        def requantize(keep_float):
            return quantize_with_ranges(float_content, quantization, samples, name=name, progress=progress,
                                        keep_float=keep_float, calibration=ranges)[0]

        content, kept = keep_sensitive_in_float(float_content, content, samples, requantize, graph.score_kind)
        if kept:
            print(f"{os.path.basename(name)}: {len(kept)} matrix product(s) kept in float32 by the sensitivity "
                  f"pass (export.sensitivity): {', '.join(n.split(';')[0] for n in kept)}", flush=True)
    check_builtin_ops(content, name)
    if mode.integer_only:  # its int8 attention matmuls, as TensorFlow's integer-only files
        content = _integer_only(content, name)
    return content


def _tensorflow_convert(graph, mode, samples, io_type, progress, name):
    """TensorFlow's converter on the graph's SavedModel, set from the mode's record (see `convert`)."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(graph.saved_model_dir())
    if mode.weights != FLOAT32:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if mode.weights == "float16":
        converter.target_spec.supported_types = [tf.float16]
    static = mode.calibrated
    if static:
        converter.representative_dataset = _calibration_generator(samples, progress)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        if io_type != FLOAT32:
            converter.inference_input_type = getattr(tf, io_type)
            converter.inference_output_type = getattr(tf, io_type)
    try:
        if static and io_type == FLOAT32 and getattr(graph, "score_kind", None) == "probabilities":
            content = _int8_with_float_softmax(converter, samples)
        else:
            content = converter.convert()
    except Exception as e:  # ConverterError and friends: the graph has no builtin-only form
        raise RuntimeError(
            f"{name}: TFLite conversion with builtin ops only failed: {conversion_cause(e)}\n"
            f"converter output:\n{str(e)[:4000]}"
        ) from None
    check_builtin_ops(content, name)
    if mode.integer_only:
        content = _integer_only(content, name)
    return content


_SCORE_OPS = ("SOFTMAX", "LOGISTIC")  # the scores' activation, kept in float32 after the output DEQUANTIZE


def float_ops(content):
    """The ops of a `.tflite` flatbuffer that read or write a float tensor, as `(index, op name)` pairs.

    The input `QUANTIZE` (from a graph input) and the output `DEQUANTIZE`
    (to a graph output, or to the scores' float32 SOFTMAX, or LOGISTIC for a
    one-logit head, that writes the graph output, see
    `_int8_with_float_softmax`, and that op) of a
    full-integer file with float32 I/O are not counted: an integer-only file with `io_type` "float32" gives `[]`, as
    one with int8 / uint8 I/O, which has no float tensor at all.
    Op names from LiteRT's `_get_ops_details()`, dtypes from
    `get_tensor_details()`.
    """
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    dtypes = {t["index"]: np.dtype(t["dtype"]) for t in interpreter.get_tensor_details()}
    inputs = {d["index"] for d in interpreter.get_input_details()}
    outputs = {d["index"] for d in interpreter.get_output_details()}
    ops = interpreter._get_ops_details()
    dequantized = {o for op in ops if op["op_name"] == "DEQUANTIZE" for o in op["outputs"]}
    # the scores' float SOFTMAX after the output DEQUANTIZE (`_int8_with_float_softmax`): its input
    final_softmax_inputs = {i for op in ops if op["op_name"] in _SCORE_OPS and set(op["outputs"]) <= outputs
                            for i in op["inputs"] if i in dequantized}
    found = []
    for op in ops:
        ins, outs = [i for i in op["inputs"] if i >= 0], [i for i in op["outputs"] if i >= 0]
        if op["op_name"] == "QUANTIZE" and set(ins) <= inputs:
            continue
        if op["op_name"] == "DEQUANTIZE" and set(outs) <= outputs | final_softmax_inputs:
            continue
        if op["op_name"] in _SCORE_OPS and set(ins) <= final_softmax_inputs:
            continue
        if any(i in dtypes and np.issubdtype(dtypes[i], np.floating) for i in ins + outs):
            found.append((op["index"], op["op_name"]))
    return found


def _integer_only(content, name):
    """An integer-only file made fast and checked: symmetric attention-matmul operands, then no float op.

    TF's converter (and LiteRT Quantizer) gives the attention matmuls' second operand (k^T, v) a nonzero zero point,
    and XNNPACK declines such an int8 BATCH_MATMUL: 1.9x float32's latency on ViT-Ti/16 (issue 11). Quantisation
    parameters only; see export/int8_graph.py and docs/traps.md. Raises RuntimeError (`check_integer_only`).
    """
    from export.int8_graph import symmetric_matmul_operands

    content, _ = symmetric_matmul_operands(content)
    check_integer_only(content, name)
    return content


def check_integer_only(content, name="model"):
    """Raises RuntimeError if a full-integer int8 flatbuffer has a float op (see `float_ops`).

    An op that falls back to float32 splits an integer-only accelerator's
    graph and hands the op back to the CPU: a float op in an int8 file fails
    the export (issue 11). Keras' own LayerNormalization left a float32 NEG
    per norm (docs/traps.md); keras_vit's layers have none.
    """
    found = float_ops(content)
    if found:
        counts = {}
        for _, op in found:
            counts[op] = counts.get(op, 0) + 1
        raise RuntimeError(
            f"{name}: the integer-only file is not integer-only: {len(found)} op(s) fall back to float "
            f"({', '.join(f'{n} {op}' for op, n in sorted(counts.items()))}; first at op index {found[0][0]}). "
            "A float op in an int8 file fails the export"
        )


def conversion_cause(error):
    """One line that says why a converter failed: its first "error:" message, not the MLIR dump around it.

    >>> conversion_cause('<unknown>:0: error: loc(callsite(fused["Erfc:", "f"] at fused["g"])): error: '
    ...                  "'tf.Erfc' op is neither a custom op nor a flex op\\n<MLIR dump>")
    "'tf.Erfc' op is neither a custom op nor a flex op"
    >>> conversion_cause("loc(...): error: 'tf.Transpose' op is neither a custom op nor a flex op\\n<MLIR ...>")
    "'tf.Transpose' op is neither a custom op nor a flex op"
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "error:" in line:
            return _strip_location(line.split("error:", 1)[1].strip())[:300]
    return lines[0][:300] if lines else type(error).__name__


def _int8_with_float_softmax(converter, samples):
    """Full-integer int8 bytes whose last op, the scores' SOFTMAX, runs in float32 after the output DEQUANTIZE.

    An int8 SOFTMAX outputs multiples of 1/256, so ten probabilities can
    miss a sum of 1 by 0.02 and a `score_threshold` query sees steps of
    0.004 (issue 16). Kept in float32, the scores sum to 1 within float32
    rounding; every op before it stays int8, so the file is integer-only
    between its input QUANTIZE and output DEQUANTIZE (`float_ops`). TensorFlow's
    selective quantisation (`tf.lite.experimental.QuantizationDebugger`,
    `denylisted_nodes`, the calibrated model's output tensor) does it, with
    the same MLIR quantiser as `converter.convert()`.

    Args:
        converter: a `tf.lite.TFLiteConverter` set up for full-integer int8
            with float32 I/O.
        samples: the calibration images (see `convert`).

    Returns:
        The `.tflite` bytes (not yet checked; `convert` checks them).
    """
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter

    with warnings.catch_warnings():  # it opens its files with tf.lite.Interpreter, which warns that it is deprecated
        warnings.filterwarnings("ignore", category=UserWarning, module=r"tensorflow\.lite\.python\.interpreter")
        debugger = tf.lite.experimental.QuantizationDebugger(
            converter=converter, debug_dataset=_calibration_generator(samples, False))
        scores = Interpreter(model_content=debugger.calibrated_model).get_output_details()[0]["name"]
        debugger.options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=[scores])
    return debugger.get_nondebug_quantized_model()


def _calibration_generator(samples, progress):
    def generate():
        bar = None
        if progress and sys.stdout.isatty():
            import keras

            bar = keras.utils.Progbar(len(samples), unit_name="calibration image")
        for i in range(len(samples)):
            yield [samples[i : i + 1]]
            if bar is not None:
                bar.update(i + 1)

    return generate


def op_names(content):
    """Returns the set of op names of a `.tflite` flatbuffer, read by LiteRT."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    return {op["op_name"] for op in interpreter._get_ops_details()}


def check_builtin_ops(content, name="model"):
    """Raises RuntimeError if the flatbuffer has Flex/custom ops or does not load in LiteRT."""
    try:
        names = op_names(content)
    except Exception as e:  # LiteRT refuses the file: report it, keep nothing
        raise RuntimeError(f"{name}: LiteRT cannot load the converted file: {e}") from None
    bad = sorted(n for n in names if n.startswith("Flex") or n in ("CUSTOM", "DELEGATE"))
    if bad:
        raise RuntimeError(f"{name}: non-builtin TFLite ops {bad}; phones' LiteRT runtimes cannot run them")
    return names
