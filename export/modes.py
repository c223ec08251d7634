"""The export modes: one record per TFLite and ONNX mode, and everything else derives from them.

A mode is how one file's numbers are stored: its weights' and activations' types, the tool that makes it, the
bars its outputs are held to against the Keras model, where it runs fast, and its names on the command line. The
CLI choices and help (`export.__main__`), the aliases and "what to try" (`export._cli_text`), the verification bars
(`export.tolerances`), the fast-path column (`export.fast_path`), the converters' settings (`export.tflite`,
`export.litert_quantization`, `export.onnx_quantization`) and docs/export.md's table all read `TFLITE` and `ONNX`
(a test holds the docs table and every module of export/ to them). Adding a mode is one record here plus its
conversion code, if its converter needs a setting no record has yet (docs/contributing.md, "Add an export mode").

Bars (`tolerances`, against Keras' outputs; `token_tolerances` for a model without classes, per token or feature
vector: see `export.tolerances`). Reasons, with the measurements behind them:
- float32 (and float32_fused): the same float32 maths, reordered by each runtime, held to max |diff| / max |Keras
  output| <= 2e-5. Measured (`python -m benchmarks.export_tolerance`, benchmarks/findings/export-tolerance.md) on
  ViT-Ti/16, S/16 and B/16 at 224 px with logits up to 330: SavedModel 0, TFLite and ONNX at most 1.5e-6. 2e-5
  leaves a 13x margin and still fails a file whose head weights are 1% off.
- float16: weights rounded to 10-bit mantissas; attention models drift by 0.03-0.16 on logits (docs/traps.md), so
  only the decision is bounded: decisive top-1 agreement >= 99%.
- dynamic_int8: int8 weights, activations quantised per batch at run time: agreement >= 98%.
- int8 (issue 45): int8 only in and out of the matrix products, after the LayerNorm rewrite; the ops a trained ViT's
  decision is sensitive to (LayerNorm, softmax, GELU, residual adds) stay float32. The bars of int8 files of
  both formats (one set per name, as ONNX int8 has the same kind of file): agreement >= 97% and an accuracy drop
  under 2 points, measured on the tests' 16 px ViT (hidden 32, ~92% accurate): 99.2% agreement, 0.8 points, with
  and without post-LayerNorm outlier channels (`export.reparameterize.with_outlier_channels`); the trained 224 px
  judges' stricter bars (99%, 0.5 points) are the edge table's (benchmarks/edge_bars.py).
- full_integer_int8: every op int8; LayerNorm, Softmax and GELU are sensitive (docs/traps.md): agreement >= 97% and,
  with labels, an accuracy drop under 2 points (a trained 224 px ViT misses it: 92.2-93.8% agreement on the edge
  judges, benchmarks/findings/int8-trained-judges.md). int8_mixed16 keeps these bars (issue 27).
- int16x8, weight_only_int8, weight_only_int4, dynamic_int4 (LiteRT Quantizer), measured on 360 held-out digits,
  decisive agreement / accuracy drop (points), tiny = the tests' 16 px ViT (hidden 32, 1 layer, ~92% accurate),
  small = hidden 64 (93%), demo = `make demo`'s ViT (98.6%): int16x8 99.7-100/0 tiny, 98.6-99.7/0.3 small, 100/0
  demo (TensorFlow's int8 on the same models: 98.6-99.4, 97.5-98.1, 99.4), so int8's bars; weight_only_int8
  100/0, 99.7-100/0.3, 100/0: 99%; weight_only_int4 (per channel) 90.6-90.8/3.3, 96.4-96.7/2.2, 99.7/0.3: 95% and
  3 points (the tiny model misses it and is reported failed); dynamic_int4 (the same int4 weights) the same.
- token_tolerances: the mean token cosine (`python -m benchmarks.token_tolerance`,
  benchmarks/findings/token-tolerance.md; three digits ViTs cut at encoder_norm, least of the three): float16
  1.000000, dynamic_int8 0.99971 (ONNX 0.99966), int8 0.99414 (ONNX 0.99898), int16x8 0.99970, int8_mixed16
  0.99875, weight_only_int8 0.99976, weight_only_int4 and dynamic_int4 0.9455. The bars sit under each least figure.
"""

import dataclasses
import types

XNNPACK = "XNNPACK (CPU)"
REFERENCE = "reference kernels only (slow on a CPU)"
FLOAT32 = "float32"  # the reference mode of every format: the float32 file the others are quantised from


@dataclasses.dataclass(frozen=True)
class Mode:
    """One export mode of one format.

    Attributes:
        name: the mode's name on the command line and in file names, e.g. "int8" (`model_int8.tflite`).
        format: "tflite" or "onnx".
        converter: what makes the file: "tensorflow" (`tf.lite.TFLiteConverter`), "litert_quantizer" (LiteRT
            Quantizer, from the float32 .tflite file), "tf2onnx", "onnxruntime" (its quantisation tools, from the
            float32 .onnx file) or "onnxruntime_transformers" (its transformer optimizer).
        weights: the stored weights' type: "float32", "float16", "int8" or "int4".
        activations: "float32"; "dynamic" (quantised at run time from the weights' bits); "int8" or "int16"
            (static, calibrated on representative images); "int8_int16" (int8, and int16 on the ops of
            `export.litert_quantization.MIXED16_OPS`); "int8_matmuls" (static int8, symmetric, in and out of the
            matrix products and the layout ops between them, `export.litert_quantization.INT8_MATMUL_OPS`; float32
            on every other op, QUANTIZE / DEQUANTIZE between, which XNNPACK runs inside its partition).
        tolerances: {figure: bar} of a classifier's file (`export.tolerances.failures`).
        token_tolerances: {figure: bar} of a file that outputs tokens or a feature vector.
        runs_fast_on: where the file runs fast, as the report's `runs_fast_on` and the docs say.
        why: one clause on why it runs fast there (or not).
        help: one clause for `--help` and the docs table.
        aliases: other tools' names for the mode (TensorFlow's, onnxruntime's, ML Kit's) and common typos.
        default: made by `keras-vit-export` when --quantization / --onnx-quantization is not given.
        io_types: the input and output types the file may take (`--int8-io-type`).
        integer_only: every op between input and output is integer, checked after conversion
            (`export.int8_graph`): what an integer-only NPU runs whole.
        balance_layer_norms: RepQ-ViT's exact LayerNorm rewrite first (`export.reparameterize`): measured on the
            calibration images in a calibrated mode, from the LayerNorms' gamma and beta in the others.
        dynamic_batch: a file with a dynamic batch dimension can be made (else batch 1 only, `batch_refused`).
        dynamic_size: "" when a .tflite file of dynamic height and width can be made, else why not.
        batch_refused: why a dynamic batch is refused ("" when it is not).
    """

    name: str
    format: str
    converter: str
    weights: str
    activations: str
    tolerances: dict
    token_tolerances: dict
    runs_fast_on: str
    why: str
    help: str
    aliases: tuple = ()
    default: bool = False
    io_types: tuple = (FLOAT32,)
    integer_only: bool = False
    balance_layer_norms: bool = False
    dynamic_batch: bool = True
    batch_refused: str = ""
    dynamic_size: str = "not measured on a file of dynamic height and width"

    @property
    def calibrated(self):
        """True when the file's activation ranges come from representative images (--calibration-data)."""
        return self.activations in ("int8", "int16", "int8_int16", "int8_matmuls")

    @property
    def slow_on_cpu(self):
        """True when a phone's CPU runs (part of) the file on LiteRT's reference kernels, not XNNPACK."""
        return "reference kernels" in self.runs_fast_on

    @property
    def file_name(self):
        """The artifact's file name without the "_pixels" suffix: model_int8.tflite, model.onnx, model_int8.onnx."""
        if self.format == "onnx":
            return "model.onnx" if self.name == FLOAT32 else f"model_{self.name}.onnx"
        return f"model_{self.name}.tflite"


_DECISION_FLOAT32 = {"relative_max_abs_diff": 2e-5}
_INT8_BARS = {"decisive_top1_agreement": 0.97, "accuracy_drop": 0.02}
_INT4_BARS = {"decisive_top1_agreement": 0.95, "accuracy_drop": 0.03}

_TFLITE = (
    Mode("float32", "tflite", "tensorflow", "float32", "float32", _DECISION_FLOAT32, _DECISION_FLOAT32,
         XNNPACK + ", GPU delegate", "float32 kernels", "float32 weights and activations: the reference file",
         aliases=("fp32", "f32", "float", "none", "default"), default=True, dynamic_size=""),
    Mode("float16", "tflite", "tensorflow", "float16", "float32", {"decisive_top1_agreement": 0.99},
         {"cosine": 0.9999}, XNNPACK + ", GPU delegate", "float16 weights dequantised once at load",
         "float16 weights, half the size; float32 activations",
         aliases=("fp16", "f16", "half"), default=True, dynamic_size=""),
    Mode("dynamic_int8", "tflite", "tensorflow", "int8", "dynamic", {"decisive_top1_agreement": 0.98},
         {"cosine": 0.999}, XNNPACK, "int8 weights, activations quantised on the fly",
         "int8 weights, activations quantised at run time: a quarter of the size, no calibration",
         aliases=("int8-dynamic", "dynamic", "dynamic-range", "drq", "dynamic-range-int8", "int8_dynamic_range"),
         default=True, dynamic_size="", balance_layer_norms=True),
    Mode("int8", "tflite", "litert_quantizer", "int8", "int8_matmuls", _INT8_BARS, {"cosine": 0.99},
         XNNPACK, "int8 matrix products and float32 LayerNorm, softmax, GELU and residual adds, all inside XNNPACK",
         "int8 matrix products (symmetric activations, calibrated on --calibration-data), float32 between them, after "
         "the exact LayerNorm rewrite: the phone-CPU file",
         aliases=("static-int8", "qint8", "w8a8", "int8-cpu", "cpu-int8"),
         default=True, balance_layer_norms=True),
    Mode("full_integer_int8", "tflite", "tensorflow", "int8", "int8", _INT8_BARS, {"cosine": 0.99},
         "integer-only NPUs (int8 activations); " + XNNPACK + " with its SOFTMAX, GELU and RSQRT on builtin kernels",
         "every op integer: the one int8 file an NPU without int16 activations runs whole",
         "full-integer int8, calibrated on --calibration-data: every op integer, for NPUs",
         aliases=("full-int8", "full-integer", "full-integer-int8", "int8-full", "uint8", "integer", "integer-only",
                  "int8-npu", "npu-int8"),
         io_types=("float32", "int8", "uint8"), integer_only=True,
         dynamic_size="TensorFlow 2.21's int8 converter leaves float CAST and QUANTIZE ops on the run-time resampling "
                      "of the position embeddings (not integer-only)"),
    Mode("int16x8", "tflite", "litert_quantizer", "int8", "int16", _INT8_BARS, {"cosine": 0.999},
         REFERENCE + "; NPUs with int16 activations",
         "XNNPACK has no int16 kernels, so a CPU runs every op on LiteRT's reference kernels",
         "int8 weights, int16 activations, calibrated: for NPUs and DSPs with int16 activations",
         aliases=("int16", "int16-activations", "a16w8", "w8a16")),  # "16x8" is TFLITE_REFUSED's: named there
    Mode("weight_only_int8", "tflite", "litert_quantizer", "int8", "float32", {"decisive_top1_agreement": 0.99},
         {"cosine": 0.999}, XNNPACK, "int8 weights dequantised to float32 at load",
         "int8 weights dequantised at load: dynamic_int8's size with float accuracy",
         aliases=("weight-int8", "weight-only")),
    Mode("weight_only_int4", "tflite", "litert_quantizer", "int4", "float32", _INT4_BARS, {"cosine": 0.98},
         "reference kernels for its matrix products (slow on a CPU)",
         "its int4 weights are dequantised by builtin kernels outside XNNPACK before every matrix product; "
         "dynamic_int4 keeps them inside XNNPACK",
         "int4 weights (per channel) dequantised before each matrix product",
         aliases=("int4", "weight-int4")),
    Mode("dynamic_int4", "tflite", "litert_quantizer", "int4", "dynamic", _INT4_BARS, {"cosine": 0.98},
         XNNPACK, "int4 weights inside XNNPACK's matrix products",
         "int4 weights, activations quantised at run time: the smallest file", aliases=("int4", "int4-dynamic")),
    Mode("int8_mixed16", "tflite", "litert_quantizer", "int8", "int8_int16", _INT8_BARS, {"cosine": 0.995},
         "integer-only NPUs with int16 activations; on a CPU its int16 ops on reference kernels (matrix products "
         "on XNNPACK)",
         "its int16 LayerNorm, residual-add and softmax ops run on LiteRT's reference kernels, between its int8 "
         "matrix products on XNNPACK",
         "integer-only, calibrated: int8 where a ViT can take it, int16 on LayerNorm, the residual adds and softmax, "
         "after the exact LayerNorm rewrite",
         integer_only=True, balance_layer_norms=True, dynamic_batch=False,
         batch_refused="with a dynamic batch LiteRT Quantizer leaves float shape ops in the graph, and the file would "
                       "not be integer-only"),
)
_ONNX = (
    Mode("float32", "onnx", "tf2onnx", "float32", "float32", _DECISION_FLOAT32, _DECISION_FLOAT32,
         "onnxruntime CPU", "float32 kernels", "float32 weights and activations: the reference file", aliases=("fp32", "float"), default=True),
    Mode("dynamic_int8", "onnx", "onnxruntime", "int8", "dynamic", {"decisive_top1_agreement": 0.98},
         {"cosine": 0.999}, "onnxruntime CPU", "int8 weights, activations quantised on the fly",
         "onnxruntime's quantize_dynamic: int8 weights, activations at run time",
         aliases=("dynamic", "int8-dynamic")),
    Mode("int8", "onnx", "onnxruntime", "int8", "int8", _INT8_BARS, {"cosine": 0.99},
         "onnxruntime CPU, QDQ NPUs (QNN, OpenVINO)", "static QDQ int8",
         "onnxruntime's quantize_static, QDQ around the matrix products, calibrated on --calibration-data",
         aliases=("qdq", "static", "static-int8")),
    Mode("float32_fused", "onnx", "onnxruntime_transformers", "float32", "float32", _DECISION_FLOAT32,
         _DECISION_FLOAT32, "onnxruntime only (CPU)",
         "float32 with onnxruntime's fused com.microsoft ops (SkipLayerNormalization, Gelu), which no other runtime "
         "has", "float32 through onnxruntime's transformer optimizer: fused com.microsoft ops, for onnxruntime alone; "
         "--opset 17 or 18", aliases=("fused", "optimized", "ort", "transformer-optimizer")),
)
# {name: Mode} per format, in the order the CLI lists them; read-only
TFLITE = types.MappingProxyType({mode.name: mode for mode in _TFLITE})
ONNX = types.MappingProxyType({mode.name: mode for mode in _ONNX})
FORMATS = types.MappingProxyType({"tflite": TFLITE, "onnx": ONNX})
# Names this stack refuses, with the reason. TensorFlow 2.21's own 16x8 mode failed on the ViT graph ("Quantization
# to 16x8-bit not yet supported for op: 'NEG'"); "16x8" is TensorFlow's name for int16x8.
TFLITE_REFUSED = types.MappingProxyType({
    "16x8": "the mode is called 'int16x8' here (int8 weights, int16 activations, made by LiteRT Quantizer)",
})


def names(fmt, **where):
    """The names of `fmt`'s modes ("tflite" or "onnx") whose attributes equal `where`, in table order.

    Example: `names("tflite", converter="tensorflow")` -> ("float32", "float16", "dynamic_int8", "int8").
    """
    return tuple(mode.name for mode in FORMATS[fmt].values()
                 if all(getattr(mode, key) == value for key, value in where.items()))


def aliases(fmt):
    """{alias: mode name, or a tuple of names when the alias fits several} of `fmt`'s modes, for "did you mean"."""
    found = {}
    for mode in FORMATS[fmt].values():
        for alias in mode.aliases:
            found.setdefault(alias, []).append(mode.name)
    return {alias: targets[0] if len(targets) == 1 else tuple(sorted(targets)) for alias, targets in found.items()}


def mode(fmt, name):
    """The record of `fmt`'s mode `name`.

    Raises:
        ValueError: `fmt` is not "tflite" or "onnx", or `name` is not one of its modes.
    """
    if fmt not in FORMATS:
        raise ValueError(f"`fmt` must be one of {', '.join(FORMATS)}. Received: fmt={fmt!r}")
    if name not in FORMATS[fmt]:
        raise ValueError(f"`quantization` must be one of {', '.join(FORMATS[fmt])} for {fmt}. "
                         f"Received: quantization={name!r}")
    return FORMATS[fmt][name]


def markdown_table():
    """docs/export.md's table of modes, made from the records (a test holds the docs to it)."""
    lines = ["| format | mode | file | what it is | bars | runs fast on | made by | options |",
             "|---|---|---|---|---|---|---|---|"]
    for mode in (*_TFLITE, *_ONNX):
        bars = ", ".join(f"{key} {value}" for key, value in mode.tolerances.items())
        made = mode.converter.replace("_", " ") + (", calibrated" if mode.calibrated else "") + \
            (", default" if mode.default else "")
        options = [f"--int8-io-type {' / '.join(mode.io_types)}"] if len(mode.io_types) > 1 else []
        if mode.format == "tflite":
            options.append("--batch-size dynamic" if mode.dynamic_batch else "batch 1 only")
            options.append("--image-size dynamic" if not mode.dynamic_size else "fixed height and width only")
        lines.append(f"| {mode.format} | `{mode.name}` | `{mode.file_name}` | {mode.help} | {bars} | "
                     f"{mode.runs_fast_on} | {made} | {'; '.join(options) or '-'} |")
    return "\n".join(lines)
