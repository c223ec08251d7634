"""The edge table's peer row: Hugging Face's PyTorch ViT-Ti/16 converted to TFLite by `litert-torch`.

Runs in its own virtual environment, never in the project's (litert-torch pulls jax, torchao and its own
ai-edge-quantizer; see benchmarks/README.md for the install line), with that environment's Python:

    /tmp/peer/bin/python benchmarks/edge_peer.py --folder /tmp/peer_files --output /tmp/peer.json

`benchmarks.edge --peer-python /tmp/peer/bin/python` runs it and adds its rows to the table. It imports
neither keras_vit nor TensorFlow. The model: `transformers.ViTForImageClassification` with ViT-Ti/16's
configuration (hidden 192, 12 layers, 3 heads, MLP 768, 224 px, 1000 classes), random init, seed 0 (no
weights can be downloaded here), with the same kind of seeded decisive head as `benchmarks.edge`
(`decisive_head`: a normal kernel centred on the inputs' mean feature, logits' spread 4). Files:
"float32" (`litert_torch.convert`) and "dynamic_int8" (its `full_dynamic_recipe`: int8 weights,
activations quantised at run time). Per file: size, top-1 agreement with the PyTorch model on the
seeded inputs (LiteRT, 2 threads, one image at a time), batch-1 latency on 1 and 2 threads (LiteRT,
XNNPACK; median of `--rounds` interleaved rounds of the median of `--runs` calls).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

SPREAD = 4.0
NEAR_TIE = 0.01  # export.tolerances.NEAR_TIE: a flip where the reference's margin is under 1% of its top score


def inputs(n, seed):
    """`n` seeded images `(n, 3, 224, 224)` in [-1, 1]: an 8 x 8 random grid, bilinear, plus noise (as edge.inputs)."""
    import torch

    rng = np.random.default_rng(seed)
    coarse = torch.from_numpy(rng.uniform(-1, 1, (n, 3, 8, 8)).astype("float32"))
    fields = torch.nn.functional.interpolate(coarse, size=(224, 224), mode="bilinear", align_corners=False).numpy()
    noise = rng.uniform(-0.1, 0.1, fields.shape).astype("float32")
    return np.clip(0.9 * fields + noise, -1, 1).astype("float32")


def build(images):
    """The seeded HF ViT-Ti/16 with a decisive head, wrapped to map pixel values to logits."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=192, num_hidden_layers=12, num_attention_heads=3,
                                    intermediate_size=768, image_size=224, patch_size=16, num_labels=1000,
                                    layer_norm_eps=1e-12)
    model = transformers.ViTForImageClassification(config).eval()

    class Logits(torch.nn.Module):
        def __init__(self, vit):
            super().__init__()
            self.vit = vit

        def forward(self, pixel_values):
            return self.vit(pixel_values=pixel_values).logits

    wrapped = Logits(model).eval()
    features = []
    hook = model.classifier.register_forward_hook(lambda m, args, out: features.append(args[0].detach()))
    with torch.no_grad():
        for i in range(0, len(images), 32):
            wrapped(torch.from_numpy(images[i:i + 32]))
    hook.remove()
    f = torch.cat(features).double().numpy()
    w = np.random.default_rng(0).standard_normal((f.shape[-1], 1000))
    centred = (f - f.mean(0)) @ w
    scale = SPREAD / centred.std()
    with torch.no_grad():
        model.classifier.weight.copy_(torch.from_numpy((w * scale).T.astype("float32")))
        model.classifier.bias.copy_(torch.from_numpy((-f.mean(0) @ w * scale).astype("float32")))
    return wrapped


def _interpreter(path, threads):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=threads)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0]["index"], interpreter.get_output_details()[0]["index"]

    def call(x):
        interpreter.set_tensor(inp, x)
        interpreter.invoke()
        return interpreter.get_tensor(out)

    return call


def agreement(path, images, reference):
    """Raw and decisive top-1 agreement of the file with `reference` logits (2 threads, one image at a time)."""
    call = _interpreter(path, 2)
    outputs = np.concatenate([call(images[i:i + 1]) for i in range(len(images))]).astype("float64")
    top_ref, top_out = reference.argmax(-1), outputs.argmax(-1)
    rows = np.arange(len(reference))
    margin = reference[rows, top_ref] - reference[rows, top_out]
    flips = top_out != top_ref
    near_tie = flips & (margin <= NEAR_TIE * np.abs(reference).max(-1))
    return float((~flips).mean()), float((~flips | near_tie).mean())


def latencies(paths, rounds, runs):
    """`{(mode, threads): ms}`, interleaved rounds as in benchmarks.edge.latencies."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.timing import interleaved_ms  # standard library only

    image = inputs(1, 0)
    calls = {(mode, t): _interpreter(path, t) for mode, path in paths.items() for t in (1, 2)}
    return interleaved_ms({key: (lambda call=call: call(image)) for key, call in calls.items()}, rounds, runs,
                          progress=lambda text: None)


def measure(folder, samples=256, rounds=10, runs=10):
    """The peer rows (benchmarks.edge's row keys, without the op profile: the caller adds it)."""
    import litert_torch
    import torch
    from litert_torch.generative.quantize import quant_recipes

    images = inputs(samples, 1)
    model = build(images)
    with torch.no_grad():
        reference = np.concatenate([model(torch.from_numpy(images[i:i + 32])).numpy()
                                    for i in range(0, samples, 32)]).astype("float64")
    os.makedirs(folder, exist_ok=True)
    example = (torch.from_numpy(inputs(1, 2)),)
    paths, export_s = {}, {}
    for mode, options in (("float32", {}), ("dynamic_int8", {"quant_config": quant_recipes.full_dynamic_recipe()})):
        start = time.perf_counter()
        paths[mode] = os.path.join(folder, f"hf_vit_ti16_litert_torch_{mode}.tflite")
        litert_torch.convert(model, example, **options).export(paths[mode])
        export_s[mode] = time.perf_counter() - start
        print(f"  peer {mode}: {os.path.getsize(paths[mode]) / 1e6:.2f} MB in {export_s[mode]:.0f} s", flush=True)
    ms = latencies(paths, rounds, runs)
    rows = []
    for mode, path in paths.items():
        raw, decisive = agreement(path, images, reference)
        size = os.path.getsize(path)
        rows.append({"model": "Ti16 (HF PyTorch, litert-torch)", "format": "tflite", "mode": mode, "path": path,
                     "size_bytes": size, "size_ratio": size / os.path.getsize(paths["float32"]),
                     "ms_1": ms[(mode, 1)], "ms_2": ms[(mode, 2)],
                     "ratio_1": ms[(mode, 1)] / ms[("float32", 1)], "ratio_2": ms[(mode, 2)] / ms[("float32", 2)],
                     "speedup": ms[(mode, 1)] / ms[(mode, 2)], "top1_agreement": raw,
                     "decisive_top1_agreement": decisive, "samples": samples, "single_ms": None,
                     "export_s": export_s[mode]})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", required=True, help="where the .tflite files are written")
    parser.add_argument("--output", required=True, help="the rows as JSON")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    rows = measure(args.folder, args.samples, args.rounds, args.runs)
    with open(args.output + ".tmp", "w") as f:
        json.dump(rows, f, indent=1)
    os.replace(args.output + ".tmp", args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
