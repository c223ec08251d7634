"""Measures the float32 export error of ViT-Ti/16, S/16 and B/16, the basis of `export.tolerances.TOLERANCES`.

    .venv/bin/python -m benchmarks.export_tolerance [--variants ViTTi16,ViTS16,ViTB16] [--images 8]

Each variant is built at 224 px with a 1000-class head, random weights (Keras' initialisers) and a
head drawn from N(0, 3^2) so that the logits reach the hundreds, as in a trained model. One float32
serving graph (`export.signature.ServingGraph`) is exported as SavedModel, float32 TFLite and ONNX,
and each file is run in its own runtime on seeded images in [-1, 1]. The table gives, per format,
max |logit|, max |diff| against Keras, and their ratio, the `relative_max_abs_diff` that the float32
bar bounds. Prints a Markdown table and writes benchmarks/results/export_tolerance.json.
"""

import argparse
import json
import os
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def measure(variant, images=8, seed=0):
    """Rows {variant, format, max_abs_logit, max_abs_diff, relative_max_abs_diff} for one variant."""
    import keras

    import keras_vit
    from export import export_onnx, export_saved_model, export_tflite
    from export.signature import ServingGraph
    from export.verify import Artifact
    from export.tolerances import compare
    from export.runtimes import run_artifact

    keras.utils.set_random_seed(seed)
    model = getattr(keras_vit, variant)(classes=1000, classifier_activation=None)
    head = model.get_layer("predictions")
    head.kernel.assign(np.random.default_rng(seed).normal(0, 3.0, head.kernel.shape).astype("float32"))
    x = np.random.default_rng(seed + 1).uniform(-1, 1, (images, 224, 224, 3)).astype("float32")
    reference = np.asarray(model.predict(x, verbose=0))
    rows = []
    with ServingGraph(model) as graph, tempfile.TemporaryDirectory() as tmp:
        files = {
            "saved_model": export_saved_model(graph, os.path.join(tmp, "sm"), verify=False),
            "tflite": export_tflite(graph, os.path.join(tmp, "m.tflite"), verify=False),
            "onnx": export_onnx(graph, os.path.join(tmp, "m.onnx"), verify=False),
        }
        for fmt, path in files.items():
            figures = compare(reference, run_artifact(Artifact(fmt, fmt, path), x))
            rows.append({"variant": variant, "format": fmt, "max_abs_logit": float(np.abs(reference).max()),
                         "max_abs_diff": figures["max_abs_diff"], "relative_max_abs_diff": figures["relative_max_abs_diff"]})
            print(rows[-1], flush=True)
    return rows


def table(rows):
    lines = ["| variant | format | max abs logit | max abs diff | max abs diff / max abs logit |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['format']} | {r['max_abs_logit']:.1f} | {r['max_abs_diff']:.2e} | "
                     f"{r['relative_max_abs_diff']:.2e} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.export_tolerance", description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="ViTTi16,ViTS16,ViTB16")
    parser.add_argument("--images", type=int, default=8)
    args = parser.parse_args(argv)
    rows = []
    for variant in args.variants.split(","):
        rows += measure(variant.strip(), args.images)
    print(table(rows))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "export_tolerance.json"), "w") as f:
        json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
