"""int8 ONNX files made by onnxruntime's own quantisation tools (`onnxruntime.quantization`).

Two modes beside the float32 file (`model.onnx`), both quantising the
float32 ONNX graph that `export.onnx.export_onnx` converts (the fourth ONNX
mode, "float32_fused", is not quantised: `export.onnx_fusion`):

- "dynamic_int8" (`model_dynamic_int8.onnx`): `quantize_dynamic`, int8
  (7-bit range, `REDUCE_RANGE`) weights of every MatMul/Gemm with a constant weight; the activations are
  quantised at run time (`DynamicQuantizeLinear` + `MatMulInteger`, both in
  the default ONNX domain). The attention's two activation-by-activation
  matmuls stay float32.
- "int8" (`model_int8.onnx`): `quantize_static` in the QDQ format, int8
  (7-bit range) weights and 8-bit (uint8) activations at the inputs of every matrix
  product (`QuantizeLinear` / `DequantizeLinear` pairs, default domain,
  which onnxruntime fuses into its integer kernels at load time; LayerNorm,
  Softmax and GELU stay float32), calibrated with min/max on representative
  images (the same ones the TFLite int8 file is calibrated on in
  `export.pipeline.export_all`).

Both files hold default-domain ONNX ops only (`export.onnx.check_onnx`), so
they are not onnxruntime-only. `quant_pre_process` (onnxruntime's
recommended pre-processing) runs first without its symbolic shape
inference, which fails on tf2onnx's dynamic-batch reshapes ("Incomplete
symbolic shape inference", docs/traps.md).
"""

import os

import numpy as np

from keras_vit.common import files as _files
from export.modes import ONNX, names

# The modes' records (`export.modes.ONNX`); those onnxruntime's quantisation tools make from the float32 file
ONNX_QUANTIZATIONS = tuple(ONNX)
INT8_QUANTIZATIONS = names("onnx", converter="onnxruntime")
# Static int8, measured with `python -m benchmarks.onnx_int8` (the tests' trained 16 px ViT on 360 held-out digits;
# ViT-Ti/16 at 224 px with random weights on 64 noise images; 1 thread, files timed in alternation):
# - per-channel weight scales: 99.2% / 100% decisive top-1 agreement with Keras (per tensor: 98.9% / 96.9%);
# - QDQ around the matrix products only: ViT-Ti/16 0.69x float32's latency, 0.28x its size. Letting onnxruntime
#   quantise every op type it can (LayerNorm's Sub/Mul/Add/Sqrt, Softmax, Transpose, the residual Adds) kept the tiny
#   ViT at 99.2% but broke ViT-Ti/16 (52%); quantising Add as well: 12.5%;
# - `quant_pre_process`: no difference in agreement or latency; kept, as onnxruntime recommends it (and warns without);
# - uint8 activations with int8 weights (onnxruntime's "U8S8"): 0.67-0.69x float32's latency against 1.04-1.07x with
#   int8 activations (S8S8) in the same runs on this machine's AVX512-VNNI CPU, same agreement. onnxruntime's
#   documentation warns that its U8S8 kernels for AVX2 *without* VNNI can saturate (docs/traps.md): verify the file on
#   the CPU that runs it.
PER_CHANNEL = True
# 7-bit weights (onnxruntime's `reduce_range`) in both int8 files: onnxruntime's x86 kernels multiply uint8 activations
# by int8 weights with VPMADDUBSW, whose pairwise int16 sums saturate on AVX2 / AVX-512 without VNNI (its quantization
# docs, "data type selection"; int8 activations go through the same kernels). Measured 2026-12-06 on an AMD EPYC
# (Zen 3, AVX2, no VNNI) with the tests' trained 16 px ViT on 360 held-out digits, top-1 agreement with Keras:
# dynamic_int8 95.0% with 8-bit weights, 100% with 7-bit; int8 (static) 85.0% with 8-bit, 99.4% with 7-bit (int8
# activations: 85.3%). The same files had passed on an Intel CPU with AVX512-VNNI. A file runs on CPUs we never see,
# so it is made to be right on all of them.
REDUCE_RANGE = True
STATIC_OP_TYPES = ("MatMul", "Gemm", "Conv")
ACTIVATION_TYPE = "uint8"


def check_onnx_quantization(quantization):
    """Raises ValueError unless `quantization` is one of `ONNX_QUANTIZATIONS`."""
    if quantization not in ONNX_QUANTIZATIONS:
        raise ValueError(
            f"`quantization` must be one of {', '.join(ONNX_QUANTIZATIONS)} for ONNX. Received: quantization={quantization!r}"
        )


def onnx_file(quantization="float32"):
    """The file name of an ONNX artifact: "model.onnx" for float32, else "model_{quantization}.onnx"
    (`model_float32_fused.onnx`, ...)."""
    check_onnx_quantization(quantization)
    return ONNX[quantization].file_name


def calibration_samples(quantization, representative_data, shape, input_range=None):
    """The calibration images of an ONNX mode: float32 `(n, *shape)` for "int8", None for the others.

    `input_range`: the `(lo, hi)` range the file's input takes, which an
    image folder is scaled to (`export.images.representative_samples`).

    Raises:
        ValueError: "int8" without representative data, or with none of
            `shape` (see `export.images.representative_samples`).
    """
    if quantization not in ONNX or not ONNX[quantization].calibrated:
        return None
    if representative_data is None:
        raise ValueError(f"quantization={quantization!r} needs representative_data (calibration images)")
    from export.images import representative_samples

    return representative_samples(representative_data, shape, input_range=input_range)


def quantize(content, quantization, samples=None, per_channel=PER_CHANNEL, preprocess=True, op_types=None,
             activation_type=ACTIVATION_TYPE):
    """Quantises float32 ONNX bytes with onnxruntime's tools; returns the int8 file's bytes.

    Args:
        content: bytes of a float32 ONNX model with one input (`images` or
            `pixels`) float32 `(batch, height, width, channels)`.
        quantization: "dynamic_int8" or "int8" (see the module docstring).
        samples: float32 calibration images `(n, height, width, channels)`,
            scaled as the graph's input expects; needed for "int8", one
            image per calibration step.
        per_channel: bool, "int8" only: one weight scale per output channel
            (default `PER_CHANNEL`) instead of one per tensor.
        preprocess: bool, default True: run onnxruntime's
            `quant_pre_process` (graph optimisation, no symbolic shapes) first.
        op_types: None (default: `STATIC_OP_TYPES` for "int8", onnxruntime's
            own list for "dynamic_int8"), a list of ONNX op types to
            quantise, or `()`: every op type onnxruntime can quantise.
        activation_type: "int8" only: "uint8" (default, `ACTIVATION_TYPE`)
            or "int8" activations.

    Returns:
        The quantised model as bytes (int8 weights; "int8": 8-bit activations too).

    Raises:
        ValueError: `quantization` is not "dynamic_int8" or "int8"; "int8"
            without calibration samples.
    """
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if quantization not in INT8_QUANTIZATIONS:
        raise ValueError(f"`quantization` must be {' or '.join(map(repr, INT8_QUANTIZATIONS))}. "
                         f"Received: quantization={quantization!r}")
    static = ONNX[quantization].calibrated
    if static and (samples is None or len(samples) == 0):
        raise ValueError(f"quantization={quantization!r} needs calibration images (representative_data)")
    with _files.temporary_directory("onnx-quant-") as work:
        source, prepared, target = (os.path.join(work, n) for n in ("float.onnx", "pre.onnx", "int8.onnx"))
        with open(source, "wb") as f:
            f.write(content)
        if preprocess:
            quant_pre_process(source, prepared, skip_symbolic_shape=True)
        else:
            prepared = source
        if not static:
            quantize_dynamic(prepared, target, weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE,
                             op_types_to_quantize=None if op_types is None else list(op_types))
        else:
            quantize_static(
                prepared, target, _calibration_reader(samples, _input_name(content)), quant_format=QuantFormat.QDQ, per_channel=per_channel,
                activation_type={"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}[activation_type],
                weight_type=QuantType.QInt8, reduce_range=REDUCE_RANGE,
                op_types_to_quantize=list(STATIC_OP_TYPES if op_types is None else op_types),
            )
        with open(target, "rb") as f:
            return f.read()


def _input_name(content):
    """The name of an ONNX model's one graph input ("images", or "pixels" for a file that scales raw pixels)."""
    import onnx

    return onnx.load_from_string(content).graph.input[0].name


def _calibration_reader(samples, input_name="images"):
    """An `onnxruntime.quantization.CalibrationDataReader` feeding one image per step as `{input_name: (1, h, w, c)}`."""
    from onnxruntime.quantization import CalibrationDataReader

    class CalibrationImages(CalibrationDataReader):
        def __init__(self, images):
            self.images = np.asarray(images, dtype="float32")
            self.input_name = input_name
            self.position = 0

        def get_next(self):
            if self.position >= len(self.images):
                return None
            self.position += 1
            return {self.input_name: self.images[self.position - 1 : self.position]}

        def rewind(self):
            self.position = 0

    return CalibrationImages(samples)


def weight_elements(content):
    """Element counts of the ONNX file's initializers by data type name, e.g. {"INT8": 52000, "FLOAT": 900}."""
    import onnx

    counts = {}
    for tensor in onnx.load_from_string(content).graph.initializer:
        kind = onnx.TensorProto.DataType.Name(tensor.data_type)
        counts[kind] = counts.get(kind, 0) + int(np.prod(tensor.dims, dtype=np.int64))
    return counts
