"""Does onnxruntime's transformer optimizer make a ViT's float32 `.onnx` file faster on a CPU? (issue 30, item 4)

    python -m benchmarks.onnx_fusion [--variants ti,s] [--folder /tmp/onnx_fusion] [--rounds 5 --runs 5]

Six files per variant (random init, seed 0; no weights can be downloaded here; speed does not depend on them):
- "keras_vit": `export.onnx.export_onnx` (tf2onnx, opset 17, dynamic batch), the file `keras-vit-export` writes;
- "keras_vit fused": that file through `onnxruntime.transformers.optimizer.optimize_model(model_type="vit")`;
- "keras_vit rewritten" and its "fused": that file with each LayerNorm subgraph rewritten as one ONNX
  `LayerNormalization` node and each GELU's products reordered (`rewritten_file`), plain and through the optimizer;
- "HF": Hugging Face's `ViTForImageClassification` of the same configuration through `torch.onnx.export`
  (TorchScript exporter, opset 17, dynamic batch: the `dynamo=True` exporter needs onnxscript, not installed);
- "HF fused": that file through the same optimizer.
The optimizer runs with `opt_level=0` (its fusions only; onnxruntime's own graph optimisations run anyway when a
session loads the file) and `use_gpu=False`. Per file: the fused nodes it reports (Attention, SkipLayerNormalization,
LayerNormalization, BiasGelu, Gelu, ...) and the latency in onnxruntime's CPU provider at batch 1 and 8 on 1 and 2
intra-op threads: the files of one setting in turn, each in a session of its own (two warm-up calls, then the
median of `--runs` calls), and the median of `--rounds` such rounds. Prints a markdown table and the CPU (`benchmarks.machine.cpu`).
"""

import argparse
import os

import numpy as np

from benchmarks.machine import cpu
from benchmarks.timing import interleaved_ms
from export.onnx_fusion import rewrite_for_fusion

# name -> (hidden_size, num_layers, num_heads, mlp_dim), patch 16 at 224 px, 1000 classes (paper Table 1, Ti/S: DeiT).
VARIANTS = {"ti": (192, 12, 3, 768), "s": (384, 12, 6, 1536), "b": (768, 12, 12, 3072)}
IMAGE = 224
PATCH = 16
CLASSES = 1000


def keras_vit_file(variant, path):
    """`path`: keras_vit's float32 ONNX file of `variant` (a `VARIANTS` key), as `keras-vit-export` makes it."""
    import keras

    import keras_vit
    from export.onnx import export_onnx

    hidden, layers, heads, mlp = VARIANTS[variant]
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=PATCH, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                        mlp_dim=mlp, input_shape=(IMAGE, IMAGE, 3), classes=CLASSES)
    # As after training: no all-zero LayerNorm beta or bias (tf2onnx drops an Add of zeros) and no all-zero head (the
    # probabilities would be uniform and compare equal whatever the file computes).
    rng = np.random.default_rng(0)
    for weight in model.weights:
        if weight.path.endswith(("beta", "gamma", "bias")) or weight.path.startswith("predictions"):
            mean = 1.0 if weight.path.endswith("gamma") else 0.0
            weight.assign(rng.normal(mean, 0.5, weight.shape).astype("float32"))
    return export_onnx(model, path, overwrite=True, verify=False)


def hf_file(variant, path):
    """`path`: Hugging Face's PyTorch ViT of `variant`'s configuration, pixels `(batch, 3, 224, 224)` to logits,
    through `torch.onnx.export` (TorchScript exporter, opset 17, dynamic batch)."""
    import torch
    import transformers

    hidden, layers, heads, mlp = VARIANTS[variant]
    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                    intermediate_size=mlp, image_size=IMAGE, patch_size=PATCH, num_labels=CLASSES)
    vit = transformers.ViTForImageClassification(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.vit = vit

        def forward(self, pixel_values):
            return self.vit(pixel_values=pixel_values).logits

    torch.onnx.export(Logits().eval(), (torch.zeros(1, 3, IMAGE, IMAGE),), path, input_names=["pixel_values"],
                      output_names=["logits"], dynamic_axes={"pixel_values": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, dynamo=False)
    return path


def fused_file(source, path, num_heads, hidden_size):
    """Writes `source` through onnxruntime's transformer optimizer (ViT model type, fusions only) to `path`.

    Returns:
        `{op type: count}` of the fused nodes the optimizer reports, those it made at least once.
    """
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(source, model_type="vit", num_heads=num_heads, hidden_size=hidden_size,
                                     opt_level=0, use_gpu=False)
    model.save_model_to_file(path)
    return {op: n for op, n in model.get_fused_operator_statistics().items() if n}


def rewritten_file(source, path):
    """Writes `source`, a tf2onnx file of keras_vit, to `path` through `export.onnx_fusion.rewrite_for_fusion`: each
    LayerNorm subgraph as one ONNX `LayerNormalization` node, each GELU in onnxruntime's pattern order.

    Returns:
        `{"LayerNormalization (rewritten)": count, "GELU (reordered)": count}`.
    """
    import onnx

    model = onnx.load(source)
    counts = rewrite_for_fusion(model)
    onnx.save(model, path)
    return counts


def _session_ms(path, threads, batch, runs):
    """The median wall time in ms of `runs` calls of `path` in onnxruntime's CPU provider on a seeded batch of
    `batch` images, in a session of its own made for it (two warm-up calls) and closed after it."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    spec = session.get_inputs()[0]
    feed = {spec.name: np.random.default_rng(0).uniform(-1, 1, [batch, *spec.shape[1:]]).astype("float32")}
    return interleaved_ms({path: lambda: session.run(None, feed)}, 1, runs, progress=lambda line: None)[path]


def measure(variants, folder, rounds, runs, progress=print):
    """Rows `{variant, file, fused, ms: {(threads, batch): ms}}` of the six files of each variant."""
    os.makedirs(folder, exist_ok=True)
    rows = []
    for variant in variants:
        hidden, _, heads, _ = VARIANTS[variant]
        files = {}
        for name, make in (("keras_vit", keras_vit_file), ("keras_vit rewritten", None), ("HF", hf_file)):
            plain = os.path.join(folder, f"{variant}_{name.replace(' ', '_')}.onnx")
            if make is None:  # keras_vit's file with ONNX LayerNormalization nodes and reordered GELUs
                files[name] = (plain, rewritten_file(files["keras_vit"][0], plain))
            else:
                files[name] = (make(variant, plain), {})
            fused = plain.replace(".onnx", "_fused.onnx")
            files[f"{name} fused"] = (fused, fused_file(plain, fused, heads, hidden))
        times = {}
        for threads in (1, 2):
            for batch in (1, 8):
                progress(f"  ViT-{variant.upper()}/16, {threads} thread(s), batch {batch}")
                # One session alive at a time: the idle workers of another file's session spin for a while
                # after each call and would take the cores of the file being timed (ViT-Ti/16, 2 threads, batch
                # 1: 17 ms against 12 ms alone); turning spinning off slows every file
                # (benchmarks/findings/op-time-threads.md).
                per_round = [{name: _session_ms(path, threads, batch, runs) for name, (path, _) in files.items()}
                             for _ in range(rounds)]
                times[threads, batch] = {name: float(np.median([r[name] for r in per_round])) for name in files}
        for name, (_, fused) in files.items():
            rows.append({"variant": variant, "file": name, "fused": fused,
                         "ms": {key: ms[name] for key, ms in times.items()}})
    return rows


def table(rows):
    """The rows as a markdown table: ms at each (threads, batch), and each file's speed against "HF" (plain)."""
    keys = [(1, 1), (2, 1), (1, 8), (2, 8)]
    lines = ["| model | file | fused nodes | " + " | ".join(f"ms, {t} thr, batch {b}" for t, b in keys)
             + " | speed vs HF (2 thr, batch 1) |", "|---|---|---|" + "---|" * (len(keys) + 1)]
    for row in rows:
        hf = next(r for r in rows if r["variant"] == row["variant"] and r["file"] == "HF")
        fused = ", ".join(f"{op} {n}" for op, n in row["fused"].items()) or "none"
        ms = " | ".join(f"{row['ms'][k]:.1f}" for k in keys)
        lines.append(f"| ViT-{row['variant'].upper()}/16 | {row['file']} | {fused} | {ms} | "
                     f"{hf['ms'][2, 1] / row['ms'][2, 1]:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="ti,s", help=f"comma list of {', '.join(VARIANTS)}")
    parser.add_argument("--folder", default="/tmp/onnx_fusion", help="where the .onnx files are written")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants must be a comma list of {', '.join(VARIANTS)}. Received: {args.variants!r}")
    if args.rounds < 1 or args.runs < 1:
        parser.error(f"--rounds and --runs must be >= 1. Received: {args.rounds}, {args.runs}")
    rows = measure(variants, args.folder, args.rounds, args.runs)
    print(f"CPU: {cpu()}")
    print(table(rows))


if __name__ == "__main__":
    main()
