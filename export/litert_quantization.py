"""TFLite modes made by LiteRT Quantizer from the float32 `.tflite` file (issue 11, item 4).

TensorFlow 2.21's converter makes "float32", "float16", "dynamic_int8" and
"full_integer_int8" (`export.tflite`). The modes here start from the float32 flatbuffer
that TensorFlow's converter writes from the same `ServingGraph`, and
quantise it with LiteRT Quantizer (package `litert-quantizer`, formerly
ai-edge-quantizer; `litert_quantizer.Quantizer`), using the configurations
of its recipes (`litert_quantizer.recipe`) and its default policy:

- "int8" (issue 45), the phone-CPU file: int8 activations (symmetric, one
  scale per tensor, zero point 0) only in and out of the matrix products
  and the layout ops between them (`INT8_MATMUL_OPS`), int8 weights per
  output channel; the LayerNorm arithmetic, SOFTMAX, GELU and the residual
  adds stay float32, with QUANTIZE / DEQUANTIZE between, which XNNPACK
  runs inside one partition (ViT-Ti/16 judge: 562 ops, 1 off XNNPACK, 2
  partitions). After the exact LayerNorm rewrite, like "int8_mixed16", and
  followed by the sensitivity pass (`export.sensitivity`). Min/max
  calibrated like "int16x8". Float32 I/O; not integer-only (NPUs take
  "full_integer_int8" or "int8_mixed16").
- "int16x8": int8 weights (symmetric, one scale per output channel) and
  int16 activations (symmetric, one scale per tensor), min/max-calibrated
  on the same representative images as "int8" (each tensor's range is the
  envelope over all images, `calibrate_min_max`, not LiteRT Quantizer's
  moving average, which clipped ViT-Ti/16's LayerNorm statistics); recipe
  `static_wi8_ai16`.
  The graph's input and output are left float32 (a QUANTIZE after the
  input, a DEQUANTIZE before the output), so an app feeds the same float32
  tensor as to every other file. The accuracy mode of integer accelerators
  (NPUs, DSPs) that run 16-bit activations. TensorFlow's own 16x8 mode fails
  on the ViT graph (docs/traps.md).
- "int8_mixed16": integer-only, int8 where a ViT can take it and int16 where
  it cannot (issue 27). Every matrix product (FULLY_CONNECTED, BATCH_MATMUL),
  the GELU and the layout ops take int8 activations (per tensor) and int8
  weights (per output channel); the ops of the LayerNorms (output tensors
  named in a `norm` scope: `norm_1`, `norm_2`, `encoder_norm`), the
  residual adds of the encoder blocks and the patch encoder, and every
  SOFTMAX take int16 activations; QUANTIZE ops convert between them. Before
  quantising, the model's LayerNorms are reparameterised (RepQ-ViT,
  `export.reparameterize.balance_layer_norms`, proven exact on the float
  model), so that the int8 input of the matrix product after each
  LayerNorm has balanced channels. Why: in a trained ViT the int8
  LayerNorm's per-token statistics and the residual stream share one int8
  scale over tokens whose spread differs by orders of magnitude
  (docs/traps.md). On the ViT-Ti/16 judge (95.0%): "int8" agrees on 92.2%
  of 256 held-out digits, this mode on 99.2% (benchmarks/findings/int8-trained-judges.md, each
  step measured). Float32 I/O. For NPUs and DSPs that take int16
  activations; on a CPU its int16 ops run on LiteRT's reference kernels.
- "weight_only_int8": int8 weights (symmetric, per output channel), a
  DEQUANTIZE to float32 in the graph, float32 compute; recipe
  `weight_only_wi8_afp32`. Size of "dynamic_int8" with float accuracy.
- "weight_only_int4": int4 weights (symmetric, per output channel, two per
  byte), a DEQUANTIZE to float32, float32 compute; recipe
  `weight_only_wi4_afp32`. The smallest file. Not blockwise: LiteRT
  Quantizer 0.11's policy allows weight-only int4 per channel or per tensor
  only; it allows blockwise int4 (block 32 to 256) only for its dynamic
  recipe, where XNNPACK quantises activations to int8 at run time. A
  weight-only blockwise config is dropped by its policy check (the file
  stays float32, silently) or, with the check skipped, fails on the graph's
  input ("only supports UniformQuantParams"); see docs/traps.md. Slow on
  CPUs: XNNPACK declines the int4 DEQUANTIZE, so every
  FULLY_CONNECTED after it runs on LiteRT's single-threaded builtin float
  kernel (ViT-Ti/16: 4.3x float32's latency).
- "dynamic_int4": int4 weights (symmetric, per output channel) stored in
  the FULLY_CONNECTED ops themselves, activations quantised to int8 at run
  time (the int4 counterpart of TensorFlow's "dynamic_int8"); recipe
  `dynamic_wi4_afp32`. XNNPACK runs it (its qd8-f32-qc4w kernels): the size
  of "weight_only_int4" at about half float32's latency (ViT-Ti/16: 0.15x
  the size, 0.47x the latency). Per channel, not blockwise: blockwise-32 on
  ViT-Ti/16 was 0.87x float32's latency, with top-1 agreement 0.8 points
  higher (docs/traps.md). In a hybrid the ResNet's CONV_2D get int4
  weights too, and XNNPACK declines those (a tiny hybrid: 0 of 5 CONV_2D
  on XNNPACK), so they run on LiteRT's builtin kernels.

Weights are quantised in FULLY_CONNECTED, CONV_2D and BATCH_MATMUL ops with
constant weights (the policy's list; "dynamic_int4": the ops its dynamic
int4 policy names, FULLY_CONNECTED among them). Every file is then checked and
verified by `export.tflite` like the others.
"""

import contextlib
import io
import os
import sys
import warnings

import numpy as np

from export.modes import TFLITE, names

PACKAGE = "litert-quantizer"
_BITS = {"int8": 8, "int4": 4}  # a record's weights -> LiteRT Quantizer's num_bits
PACKAGE_VERSION = "0.11.0"
LITERT_QUANTIZATIONS = names("tflite", converter="litert_quantizer")
CALIBRATED = tuple(m for m in LITERT_QUANTIZATIONS if TFLITE[m].calibrated)
# The int16 ops of a mode with activations "int8_int16" (int8_mixed16), by output tensor name (LiteRT Quantizer matches each regex against them) and op type:
# a LayerNorm's arithmetic (keras_vit's norm_1, norm_2, encoder_norm), the residual adds, every softmax
# The int8 ops of a mode with activations "int8_matmuls" (int8): every matrix product and the layout ops between the
# attention's projections and its two batch matmuls (head split and merge), so that no float copy sits between them.
# Every other op (LayerNorm arithmetic, SOFTMAX, GELU, the residual and position-embedding ADDs, the class token's
# slice and concatenation) stays float32, with QUANTIZE / DEQUANTIZE between, which XNNPACK runs in its partition.
INT8_MATMUL_OPS = ("FULLY_CONNECTED", "BATCH_MATMUL", "CONV_2D", "DEPTHWISE_CONV_2D", "RESHAPE", "TRANSPOSE")
MIXED16_OPS = (
    (r".*norm[^/]*/.*", ("MEAN", "SUB", "MUL", "RSQRT", "ADD")),
    (r".*transformer_block_\d+(_\d+)?/add[^/]*$", ("ADD",)),
    (r".*patch_encoder(_\d+)?/add[^/]*$", ("ADD",)),
    (r".*", ("SOFTMAX",)),
)


def missing_package(quantization):
    """The reason a LiteRT Quantizer mode cannot be made here (the package to install), or None.

    Returns None when `litert_quantizer` imports (or `quantization` is not
    one of `LITERT_QUANTIZATIONS`); else one sentence naming the package and
    the pip command.
    """
    if quantization not in LITERT_QUANTIZATIONS:
        return None
    try:
        import litert_quantizer  # noqa: F401
    except ImportError as e:
        return (f"quantization={quantization!r} is made by LiteRT Quantizer, which is not installed ({e}); "
                f"install it with `pip install {PACKAGE}=={PACKAGE_VERSION}` (or the `export` extra)")
    return None


def _float_io(manager):
    """Leaves the graph's input and output float32 (a QUANTIZE after the input, a DEQUANTIZE before the output)."""
    from litert_quantizer import qtyping
    from litert_quantizer.algorithm_manager import AlgorithmName

    for io in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
        manager.add_quantization_config(".*", io, algorithm_key=AlgorithmName.NO_QUANTIZE)


def _int8_matmuls(manager, weight_bits, keep_float):
    """int8 on `INT8_MATMUL_OPS` only: symmetric int8 activations (zero point 0, which XNNPACK needs on a batch
    matmul's second operand, `export.int8_graph`), int8 weights per output channel; the ops whose output tensor
    name matches a regex of `keep_float` stay float32 (the sensitivity pass); float32 I/O."""
    from litert_quantizer import qtyping
    from litert_quantizer.algorithm_manager import AlgorithmName

    config = qtyping.OpQuantizationConfig(
        activation_tensor_config=qtyping.TensorQuantizationConfig(num_bits=8, symmetric=True),
        weight_tensor_config=qtyping.TensorQuantizationConfig(
            num_bits=weight_bits, symmetric=True, granularity=qtyping.QuantGranularity.CHANNELWISE),
        compute_precision=qtyping.ComputePrecision.INTEGER, explicit_dequantize=False)
    for op in INT8_MATMUL_OPS:
        manager.add_quantization_config(".*", getattr(qtyping.TFLOperationName, op),
                                        algorithm_key=AlgorithmName.MIN_MAX_UNIFORM_QUANT, op_config=config)
    for regex in keep_float:  # later rules win in LiteRT Quantizer's recipe
        manager.add_quantization_config(regex, qtyping.TFLOperationName.ALL_SUPPORTED,
                                        algorithm_key=AlgorithmName.NO_QUANTIZE)
    _float_io(manager)


def recipe(quantization, keep_float=()):
    """The LiteRT Quantizer recipe (a list of dicts, JSON-serialisable) of one of `LITERT_QUANTIZATIONS`.

    `keep_float`: regexes of op output tensor names that stay float32 ("int8" only: the layers its sensitivity pass
    keeps out of int8, `export.sensitivity`).

    Raises:
        ValueError: `quantization` is not one of `LITERT_QUANTIZATIONS`.
        ImportError: `litert_quantizer` is not installed.
    """
    from litert_quantizer import qtyping
    from litert_quantizer.recipe_manager import RecipeManager

    if quantization not in LITERT_QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {', '.join(LITERT_QUANTIZATIONS)}. Received: quantization={quantization!r}"
        )
    mode = TFLITE[quantization]  # its record says which of LiteRT Quantizer's three configs it is, and the bits
    every = qtyping.TFLOperationName.ALL_SUPPORTED
    weight_bits = _BITS[mode.weights]
    manager = RecipeManager()
    if mode.activations == "float32":
        manager.add_weight_only_config(".*", every, num_bits=weight_bits)
    elif mode.activations == "dynamic":
        manager.add_dynamic_config(".*", every, num_bits=weight_bits)
    elif mode.activations == "int8_matmuls":
        _int8_matmuls(manager, weight_bits, keep_float)
    else:  # static: int16, int8, or int8 with int16 on MIXED16_OPS
        activation_bits = 16 if mode.activations == "int16" else 8
        manager.add_static_config(".*", every, activation_num_bits=activation_bits, weight_num_bits=weight_bits)
        if mode.activations == "int8_int16":
            for regex, ops in MIXED16_OPS:
                for op in ops:
                    manager.add_static_config(regex, getattr(qtyping.TFLOperationName, op), activation_num_bits=16,
                                              weight_num_bits=weight_bits)
        _float_io(manager)
    return manager.get_quantization_recipe()


def quantize(float_content, quantization, samples=None, name="model", num_threads=None, progress=True, keep_float=(),
             calibration=None):
    """`quantize_with_ranges`' file alone: the new flatbuffer's bytes (see there)."""
    return quantize_with_ranges(float_content, quantization, samples, name, num_threads, progress, keep_float,
                                calibration)[0]


def quantize_with_ranges(float_content, quantization, samples=None, name="model", num_threads=None, progress=True,
                         keep_float=(), calibration=None):
    """Quantises a float32 `.tflite` flatbuffer with LiteRT Quantizer; returns the new flatbuffer's bytes.

    Args:
        float_content: bytes of a float32 `.tflite` file with one signature
            (TensorFlow's converter output for a `ServingGraph`: signature
            "serving_default", input "images" or "pixels" `(batch, h, w, c)` float32).
        quantization: one of `LITERT_QUANTIZATIONS`.
        samples: float32 calibration images `(n, h, w, c)` in the file's
            input scale; needed for "int16x8" (one calibration step each),
            ignored by the weight-only modes.
        name: the artifact's name, for messages.
        num_threads: LiteRT threads for calibration (default: the CPU count).
        progress: bool; False hides LiteRT Quantizer's own tqdm bars (it
            shows them for any model of 100 ops or more, whatever it is told).
        keep_float: see `recipe`.
        calibration: the ranges of an earlier call on the same file and
            samples (`calibrate_min_max`'s dict), reused instead of calibrating again.

    Returns:
        `(bytes, ranges)`: a self-contained flatbuffer (`inline_buffers`), and the calibrated ranges
        (`calibrate_min_max`'s dict, or `calibration` as given; None for a mode without calibration).

    Raises:
        ValueError: unknown mode; "int16x8" without calibration images.
        ImportError: `litert_quantizer` is not installed (message: what to install).
        RuntimeError: LiteRT Quantizer fails (the message's first line says why)
            or leaves the file unquantised.
    """
    reason = missing_package(quantization)
    if reason:
        raise ImportError(reason)
    if quantization in CALIBRATED and (samples is None or len(samples) == 0):
        raise ValueError(f"quantization={quantization!r} needs representative_data (calibration images)")
    from ai_edge_litert.interpreter import Interpreter
    from litert_quantizer import Quantizer

    quantization_recipe = recipe(quantization, keep_float)
    quantizer = Quantizer(bytes(float_content), quantization_recipe)
    # its calibration and transformation bars are tqdm bars on stderr: shown on a terminal when progress is on
    bars = contextlib.nullcontext() if progress and sys.stderr.isatty() else contextlib.redirect_stderr(io.StringIO())
    try:
        with bars, warnings.catch_warnings():
            # its calibration interpreter keeps every tensor, and LiteRT warns that this is "for debugging purposes
            # only" (seen on a terminal, where the bars are not redirected): what the calibration needs, not a fault
            warnings.filterwarnings("ignore", message=r"Warning: Enabling `experimental_preserve_all_tensors`",
                                    category=UserWarning)
            if quantizer.need_calibration and calibration is None:
                signatures = Interpreter(model_content=bytes(float_content)).get_signature_list()
                (key, signature), = signatures.items()
                (input_name,) = signature["inputs"]
                calibration = calibrate_min_max(float_content, quantization_recipe, key, input_name, samples,
                                                num_threads or os.cpu_count() or 1)
            result = quantizer.quantize(calibration, enable_progress_bar=False, enable_progress_report=False)
    except Exception as e:  # LiteRT Quantizer's errors come from deep inside it: name the mode and the cause
        first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
        raise RuntimeError(f"{name}: LiteRT Quantizer failed to make {quantization!r}: {first}") from e
    content = inline_buffers(bytes(result.quantized_model))
    if not quantized_weight_types(content):
        raise RuntimeError(f"{name}: LiteRT Quantizer left no quantised weight in the {quantization!r} file")
    return content, calibration


def calibrate_min_max(float_content, quantization_recipe, signature_key, input_name, samples, num_threads):
    """`{tensor name: {"min", "max"}}`: each tensor's least and greatest value over all `samples`.

    `Quantizer.calibrate` merges the steps of one call with a moving average
    (`qsv_utils.moving_average_update`, smoothing 0.95): its range is a
    weighted mean of the last ~20 images' extremes, not their envelope, so an
    image past that mean is clipped. On ViT-Ti/16's int16x8 file the
    LayerNorm means and variances of the late blocks were clipped to half
    their held-out values (their own SNR 11-30 dB) and top-1 agreement
    stopped at 98.0% (docs/traps.md). Here LiteRT Quantizer's own
    `calibrator.Calibrator` runs every image with its own envelope merge,
    `qsv_utils.min_max_update` (element-wise min and max, as TensorFlow's
    converter calibrates), in one calibrator: one read of the model for all
    images (one calibrator per image spent 26 of 36 s re-reading the tests'
    16 px ViT, 400 times, on an AMD EPYC, 2026-12-06). The images run in
    its profiler-based mode (C++ min/max, the same values); one image in
    its default mode says which tensors, in which shapes.

    Args:
        float_content: bytes of the float32 `.tflite` file to be quantised.
        quantization_recipe: the LiteRT Quantizer recipe it will be quantised with (`recipe(...)`), one that needs
            calibration; it says which ops' tensors are calibrated.
        signature_key, input_name: the float model's one signature and its input.
        samples: float32 images `(n, h, w, c)`, n >= 1, in the model's input scale.
        num_threads: int >= 1, LiteRT threads.

    Returns:
        `{tensor name: QSV dict}` for `Quantizer.quantize`, with "min" and "max" as arrays.
    """
    import numpy as np
    from litert_quantizer import calibrator
    from litert_quantizer.recipe_manager import RecipeManager
    from litert_quantizer.utils import qsv_utils

    manager = RecipeManager()
    manager.load_quantization_recipe(quantization_recipe)
    steps = [{input_name: samples[i : i + 1]} for i in range(len(samples))]

    def calibrated(images, mode=calibrator.CalibrationMode.CALIBRATION_PRESERVE_ALL_TENSORS):
        calibration = calibrator.Calibrator(bytes(float_content), num_threads=num_threads,
                                            qsv_update_func=qsv_utils.min_max_update, mode=mode)
        calibration.calibrate({signature_key: images}, manager)
        return calibration.get_model_qsvs()

    # The tensors the recipe calibrates, in the library's own shapes and float32: its default mode, on one image.
    template = calibrated(steps[:1])
    # Every image's extremes, gathered by LiteRT's C++ profiler (the library's CALIBRATION_PROFILER_BASED mode:
    # per-tensor min and max, float64 scalars, every tensor): the same values, 0.02-0.07x the time of the default
    # mode's Python pass over every op of every image on the tests' ViT (files byte for byte the same;
    # benchmarks/findings/suite-time-avx2.md).
    ranges = calibrated(steps, calibrator.CalibrationMode.CALIBRATION_PROFILER_BASED)
    if not all(name in ranges and np.size(qsv["min"]) == np.size(qsv["max"]) == 1 for name, qsv in template.items()):
        return calibrated(steps)  # a tensor the profiler did not see, or a per-channel range: the default mode
    return {name: {**qsv, **{key: np.reshape(ranges[name][key], np.shape(qsv[key])).astype(np.asarray(qsv[key]).dtype)
                             for key in ("min", "max")}}
            for name, qsv in template.items()}


def inline_buffers(content):
    """The same `.tflite` model with every buffer inside the flatbuffer, as TensorFlow's converter writes it.

    LiteRT Quantizer serialises a model whose large buffers (1 KiB and up,
    256 KiB in all) exceed a threshold with those buffers after the
    flatbuffer (`Buffer.offset` / `Buffer.size`). tflite-support's metadata
    writer (0.4.4) does not know these fields and drops the data: the demo
    ViT's int16x8 file shrank from 1.0 MB to 0.17 MB and failed in LiteRT
    ("Input tensor 57 lacks data"); see docs/traps.md. Returns `content`
    unchanged when no buffer lies outside.
    """
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(bytearray(content), 0))
    outside = [b for b in model.buffers if (b.offset or 0) > 1]
    if not outside:
        return content
    for buffer in outside:
        buffer.data = np.frombuffer(content, np.uint8, buffer.size, buffer.offset)
        buffer.offset, buffer.size = 0, 0
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def quantized_weight_types(content):
    """The integer types of a `.tflite` file's constant weight tensors, e.g. {"int8"} or {"int4"}.

    Read from the flatbuffer with TensorFlow's schema (`tflite` package via
    `tensorflow.lite.python.schema_py_generated`): LiteRT's Python API shows
    an int4 tensor as int8. A tensor counts as a weight when it has a
    buffer with data and a quantisation scale.
    """
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(bytearray(content), 0))
    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    found = set()
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            buffer = model.buffers[tensor.buffer] if tensor.buffer < len(model.buffers) else None
            has_data = buffer is not None and (buffer.data is not None and len(buffer.data) > 0 or (buffer.size or 0) > 0)
            scaled = tensor.quantization is not None and tensor.quantization.scale is not None
            if has_data and scaled and names.get(tensor.type, "").startswith(("INT", "UINT")):
                found.add(names[tensor.type].lower())
    return found
