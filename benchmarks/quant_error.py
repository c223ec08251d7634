"""Where a quantised `.tflite` file's error enters: signal-to-noise ratio of every op's output against float32.

    .venv/bin/python -m benchmarks.quant_error FLOAT32.tflite QUANTISED.tflite [...] [--images 4]

Each file runs on LiteRT's builtin kernels with every intermediate kept
(`experimental_preserve_all_tensors`) on the same batch-1 inputs: the first `--images` held-out digits of
scikit-learn's digits at the float32 file's input size, in [-1, 1] (`keras_vit.data.digits`). Tensors are
matched by name (TensorFlow's converter and LiteRT Quantizer keep the float graph's names); an int8, uint8 or
int16 tensor with one scale is dequantised first (per-channel weights are not op outputs). Every file must
take float32 images (int8 / uint8 I/O files are refused). For each matched op output, SNR = 10 log10(sum f^2 / sum (f - q)^2)
in dB over the images (float32 rounding alone: about 100 dB; each lost bit costs 6 dB). Prints, per op type,
the median SNR of its outputs in each file, and the SNR of each file's output tensor (the model's output, not
a median: a confident softmax keeps a high SNR even where the ops before it lose more). `--by-layer` adds the SNR
of each encoder block's layers (norm_1, attention, norm_2, mlp, the residual adds) in order: where along the depth
the error grows.

Then each op's own error ("local"): its output against what the op computes in float64 from the same file's
(dequantised) inputs, for MEAN, MUL, ADD, SUB, RSQRT, SOFTMAX, GELU (exact erf GELU), FULLY_CONNECTED and BATCH_MATMUL (with
their dequantised weights and bias, per channel where the file quantises per channel); the median and the
lowest SNR per op type. Error that comes in with the inputs (the quantised weights included) does not count
here, so a low figure names the kernel (or the quantisation of that op's output) that loses precision. Layout
ops are not covered; in a dynamic-range or weight-only file the element-wise ops compute in float, so this
table shows only float32 rounding there (over 100 dB), and its matrix products show the run-time
quantisation of their inputs.

Used for issue 11's int16x8 agreement bar (benchmarks/findings/int16x8-calibration.md): where int16 activations lose
against the files that quantise weights only. Nothing here asserts a figure.
"""

import argparse
import collections
import os
import re
import sys

import numpy as np

from export.layer_error import runs, snr_db, tensors


def measure(float_path, paths, images):
    """`{file: {"by_op": {op: (count, median dB)}, "output_db": dB}}` against the float32 file."""
    reference, reference_output = tensors(float_path, images)
    out = {}
    for path in paths:
        got, output = tensors(path, images)
        by_op = collections.defaultdict(list)
        for name, (op, value) in got.items():
            if name in reference and reference[name][1].shape == value.shape:
                by_op[op].append(snr_db(reference[name][1], value))
        out[os.path.basename(path)] = {"by_op": {op: (len(v), float(np.median(v))) for op, v in by_op.items()},
                                       "output_db": snr_db(reference_output, output)
                                       if reference_output.shape == output.shape else None}
    return out


def _layer_of(name):
    """`(block, layer)` of a tensor name such as "vision_transformer/transformer_block_3/norm_2/mul_2" -> (3, "norm_2"),
    or None for a tensor outside the encoder blocks; Keras' "_1" name suffixes dropped."""
    parts = name.split(";")[0].split("/")
    for i, part in enumerate(parts[:-1]):
        match = re.fullmatch(r"transformer_block_(\d+)(?:_1)?", part)
        if match:
            layer = parts[i + 1]
            if i + 2 < len(parts):  # a sub-layer's scope: its Keras call suffix "_1" dropped (norm_1_1 -> norm_1)
                layer = layer[:-2] if layer.endswith("_1") else layer
            return int(match.group(1)), layer  # else an op of the block itself: "add", "add_1", ...
    return None


def by_layer(float_path, path, images):
    """Layer by layer, in execution order: `[(block, layer, op, dB)]`, the SNR against float32 of the last op output
    of each layer of each encoder block ("norm_1", "attention", "norm_2", "mlp", ...; "add" for the block's own
    residual adds), where the quantised file's error grows block after block."""
    reference, _ = tensors(float_path, images)
    got, _ = tensors(path, images)
    last = {}
    for name, (op, value) in got.items():
        where = _layer_of(name)
        if where is not None and name in reference and reference[name][1].shape == value.shape:
            last.pop(where, None)  # keep the dict in order of each layer's last op
            last[where] = (op, snr_db(reference[name][1], value))
    return [(block, layer, op, db) for (block, layer), (op, db) in last.items()]


def layer_markdown(rows_by_file):
    """`{file: by_layer(...)}` as one table: a row per (block, layer), a column per file."""
    files = list(rows_by_file)
    keys = list(dict.fromkeys((b, layer) for rows in rows_by_file.values() for b, layer, _, _ in rows))
    cells = {f: {(b, layer): (op, db) for b, layer, op, db in rows} for f, rows in rows_by_file.items()}
    lines = ["| block | layer (last op) | " + " | ".join(files) + " |", "|---|---|" + "---|" * len(files)]
    for key in keys:
        op = next(cells[f][key][0] for f in files if key in cells[f])
        lines.append(f"| {key[0]} | {key[1]} ({op}) | "
                     + " | ".join("n/a" if key not in cells[f] else f"{cells[f][key][1]:.1f}" for f in files) + " |")
    return "\n".join(lines)


def _reference_op(name, inputs, interpreter):
    """What op `name` computes in float64 from `inputs` (dequantised), or None for an op not covered."""
    from scipy.special import erf

    if name == "MEAN":
        axes = tuple(int(a) for a in np.atleast_1d(interpreter.get_tensor(inputs[1][0])))
        return inputs[0][1].mean(axis=axes, keepdims=True)
    if name in ("MUL", "ADD", "SUB"):
        a, b = inputs[0][1], inputs[1][1]
        return {"MUL": a * b, "ADD": a + b, "SUB": a - b}[name]
    if name == "RSQRT":
        with np.errstate(divide="ignore"):
            return 1 / np.sqrt(inputs[0][1])
    if name == "SOFTMAX":
        x = inputs[0][1]
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if name == "GELU":
        x = inputs[0][1]
        return 0.5 * x * (1 + erf(x / np.sqrt(2)))
    if name == "FULLY_CONNECTED":  # x (..., in) @ W (out, in).T + b (out); float, int8 or int4 (unpacked) weights
        x, w = inputs[0][1], inputs[1][1]
        if w.ndim != 2 or x.shape[-1] != w.shape[1]:
            return None
        y = x.reshape(-1, w.shape[1]) @ w.T
        return y + inputs[2][1] if len(inputs) > 2 else y
    if name == "BATCH_MATMUL":  # adj_y is not exposed: a (.., m, k) @ b (.., k, n), else @ b (.., n, k) transposed
        a, b = inputs[0][1], inputs[1][1]
        if a.shape[-1] == b.shape[-2]:
            return a @ b
        return a @ np.swapaxes(b, -1, -2) if a.shape[-1] == b.shape[-1] else None
    return None


def local_snr(path, images):
    """`{op: [dB per op]}`: each covered op's output against float64 of its own dequantised inputs (see above)."""
    out = collections.defaultdict(list)
    for interpreter, value in runs(path, images):
        for op in interpreter._get_ops_details():
            inputs = [(i, value(i)) for i in op["inputs"] if i >= 0]
            ideal = _reference_op(op["op_name"], inputs, interpreter) if inputs else None
            if ideal is None:
                continue
            got = value(op["outputs"][0])
            if np.all(np.isfinite(ideal)) and ideal.size == got.size:
                out[op["op_name"]].append(snr_db(ideal.reshape(got.shape), got))
    return out


def local_markdown(results):
    """`results`: {file: local_snr(...)} as a table of median / lowest dB per op type."""
    files = list(results)
    ops = sorted({op for r in results.values() for op in r})
    lines = ["| op (its own error) | " + " | ".join(files) + " |", "|---|" + "---|" * len(files)]
    for op in ops:
        cells = ["n/a" if not results[f].get(op) else
                 f"{np.median(results[f][op]):.1f} / {np.min(results[f][op]):.1f}" for f in files]
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(result):
    files = list(result)
    ops = sorted({op for r in result.values() for op in r["by_op"]})
    lines = ["| op | " + " | ".join(files) + " |", "|---|" + "---|" * len(files)]
    for op in ops:
        cells = []
        for f in files:
            count, db = result[f]["by_op"].get(op, (0, None))
            cells.append("n/a" if db is None else f"{db:.1f} ({count})")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    lines.append("| **model output** | " + " | ".join(
        "n/a" if result[f]["output_db"] is None else f"**{result[f]['output_db']:.1f}**" for f in files) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quant_error", description=__doc__.splitlines()[0])
    parser.add_argument("float32", help="the float32 .tflite file of the same graph")
    parser.add_argument("quantised", nargs="+", help="quantised .tflite files")
    parser.add_argument("--images", type=int, default=4, help="held-out digits to run (default 4)")
    parser.add_argument("--by-layer", action="store_true",
                        help="also the SNR of each encoder block's layers in order: where the error grows")
    args = parser.parse_args(argv)
    for path in [args.float32, *args.quantised]:
        if not (os.path.isfile(path) and path.endswith(".tflite")):
            parser.exit(2, f"{parser.prog}: error: each file must be an existing .tflite file. Received: {path}\n")
    if args.images < 1:
        parser.exit(2, f"{parser.prog}: error: --images must be a positive int. Received: {args.images}\n")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from ai_edge_litert.interpreter import Interpreter

    from keras_vit import data

    for path in [args.float32, *args.quantised]:  # named up front: a file LiteRT cannot load, or integer input
        try:
            dtype = Interpreter(model_path=path).get_input_details()[0]["dtype"]
        except ValueError as e:
            parser.exit(2, f"{parser.prog}: error: LiteRT cannot load {path}: {e}\n")
        if dtype != np.float32:
            parser.exit(2, f"{parser.prog}: error: each file must take float32 images (export's default io_type). "
                           f"Received: {path} takes {np.dtype(dtype).name}\n")
    size = int(Interpreter(model_path=args.float32).get_input_details()[0]["shape"][1])
    ds = data.digits("validation", image_size=size, batch_size=args.images, shuffle=False)
    images = next(iter(ds))[0].numpy().astype("float32")[: args.images]
    print("median SNR of each op type's outputs against float32, dB (matched outputs)")
    print(markdown(measure(args.float32, args.quantised, images)))
    print()
    print("each op's own error: median / lowest SNR, dB, of its output against float64 of its dequantised inputs")
    print(local_markdown({os.path.basename(p): local_snr(p, images) for p in args.quantised}))
    if args.by_layer:
        print()
        print("layer by layer: SNR against float32 of each encoder layer's output (its last op), dB")
        print(layer_markdown({os.path.basename(p): by_layer(args.float32, p, images) for p in args.quantised}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
