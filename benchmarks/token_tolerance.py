"""The bars of token-sequence exports (issue 29, item 8): each mode's token cosine on trained backbones.

    .venv/bin/python -m benchmarks.token_tolerance            # three digits ViTs, every TFLite and ONNX mode

A backbone that outputs its token sequence, `(batch, tokens, hidden_size)` (`include_top=False, pooling=None`),
has no decision to agree on, so its files are verified token by token (`export.tolerances.TOKEN_TOLERANCES`). This
measures what each mode gives: ViTs trained on scikit-learn's digits at 16 px (a trained model's features, not
random weights' ones, are what a dense head reads), cut at `encoder_norm`, exported with every mode and compared
with Keras on the 360 held-out digits. Per file: the mean token cosine (the bar's figure), the least token's
cosine, and the largest difference relative to the largest |output|. Nothing here asserts a time or a bar.
"""

import argparse
import json
import os
import tempfile

import keras

MODELS = {  # name: (hidden_size, num_layers, num_heads, epochs): the tests' tiny ViT, a wider one, make demo's shape
    "tiny (hidden 32, 1 layer)": (32, 1, 2, 15),
    "small (hidden 64, 2 layers)": (64, 2, 2, 30),
    "demo (hidden 128, 4 layers)": (128, 4, 4, 30),
}


def trained_backbone(hidden_size, num_layers, num_heads, epochs, seed=0):
    """A digits classifier trained `epochs` at 16 px (the export tests' recipe), cut at its `encoder_norm`."""
    import keras_vit
    from keras_vit import data, training

    keras.utils.set_random_seed(seed)
    train = data.digits("train", image_size=16, batch_size=64, seed=seed)
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=hidden_size, num_layers=num_layers,
                                        num_heads=num_heads, mlp_dim=2 * hidden_size, input_shape=(16, 16, 3),
                                        classes=10, classifier_activation=None)
    training.compile_model(model, total_steps=epochs * int(train.cardinality()), learning_rate=3e-3)
    model.fit(train, epochs=epochs, verbose=0, shuffle=False)
    return keras.Model(model.input, model.get_layer("encoder_norm").output, name="backbone")


def measure(models=MODELS):
    """Rows (model, artifact, cosine, min_cosine, relative_max_abs_diff) of every mode on each trained backbone."""
    from export.onnx_quantization import ONNX_QUANTIZATIONS
    from export.pipeline import export_all
    from export.tflite import QUANTIZATIONS
    from export.verify import VerificationError

    rows = []
    for name, config in models.items():
        backbone = trained_backbone(*config)
        with tempfile.TemporaryDirectory() as folder:
            try:  # a file outside today's bar still has its figures in report.json, written before the error
                export_all(backbone, folder, quantizations=QUANTIZATIONS, onnx_quantization=ONNX_QUANTIZATIONS,
                           calibration_data="digits", measure_latency=False, mediapipe=False)
            except VerificationError:
                pass
            with open(os.path.join(folder, "report.json")) as f:
                report = json.load(f)
        for row in report["artifacts"]:
            rows.append((name, row["name"], row.get("cosine"), row.get("min_cosine"), row.get("relative_max_abs_diff")))
    return rows


def markdown(rows):
    lines = ["| model | artifact | token cosine (mean) | least token's cosine | relative max diff |",
             "|---|---|---|---|---|"]
    for name, artifact, cosine, least, relative in rows:
        lines.append(f"| {name} | {artifact} | {cosine:.6f} | {least:.6f} | {relative:.2e} |")
    return "\n".join(lines)


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(markdown(measure()))


if __name__ == "__main__":
    main()
