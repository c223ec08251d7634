"""Issue 13, item 1: each position-embedding kind round-trips through .keras and exports verified, like the default.

The default kind ("learned") is not trained again here: `make demo`'s trained model (tests/test_demo_export.py) and
the export tests' trained ViT (`conftest.trained_vit`) export it in every mode against the same bars, and at a
fixed size every kind's .tflite file has the same ops (the table folds into one constant ADD; docs/traps.md). It was
a quarter of this module's time, 3 of the suite's 90 minutes on an AVX2-only CPU.

For each other kind a small ViT is trained on scikit-learn's digits (the recipe of `conftest.trained_vit`, which the
default kind's export tests use: seed 0, 16 px, patch 4, AdamW 3e-3), saved to .keras and reloaded (identical
outputs), and the reloaded model goes through `export_all` with every format, every TFLite mode
(`export.tflite.QUANTIZATIONS`) and every ONNX mode, calibrated and verified on digits (360 held-out images) against
the bars of `export.tolerances.TOLERANCES`, none loosened.

Why 2 layers, hidden 64 and 30 epochs, not `trained_vit`'s 1 layer, hidden 32 and 15 epochs (docs/traps.md, the
row on position-embedding kinds): with 1 layer every kind's int8 and weight_only_int4 agreement sits within about
3 points of its bar, and which kind misses moves with the width, the seed and the epochs (the default kind itself
misses weight_only_int4 at hidden 32: 90.6%); the flipped decisions are Keras' near-ties, and every kind's .tflite
file has the same ops. "none" (no position information) is the least accurate and missed weight_only_int4 in every
1-layer run. These models are 93-98% accurate. "none" trains 40 epochs: at 30 its weight_only_int4 agreement was
95.3%, one image over the bar; at 40, 96.4%.
"""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from export.onnx_quantization import ONNX_QUANTIZATIONS
from export.output_folder import artifact_file
from export.output_folder import FORMATS
from export.images import VERIFY_SAMPLES
from export.pipeline import export_all
from export.tflite import QUANTIZATIONS
from export.tolerances import TOLERANCES
from export.verify import VerificationError
from keras_vit import data, training

pytest.importorskip("litert_quantizer")
pytestmark = [pytest.mark.export, pytest.mark.slow]

KINDS = ("learned_2d", "sincos_2d", "none")
HIDDEN = 64
LAYERS = 2
EPOCHS = {"learned_2d": 30, "sincos_2d": 30, "none": 40}


def _trained(kind):
    """`conftest.trained_vit`'s recipe (seed 0, 16 px digits, AdamW 3e-3) with `kind`, at HIDDEN, LAYERS, EPOCHS[kind]."""
    keras.utils.set_random_seed(0)
    train = data.digits("train", image_size=16, batch_size=64, seed=0)
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_size=HIDDEN, num_layers=LAYERS, num_heads=2, mlp_dim=2 * HIDDEN,
        input_shape=(16, 16, 3), classes=10, classifier_activation=None, position_embedding=kind, name=f"vit_{kind}",
    )
    epochs = EPOCHS[kind]
    training.compile_model(model, total_steps=epochs * int(train.cardinality()), learning_rate=3e-3)
    model.fit(train, epochs=epochs, verbose=0, shuffle=False)  # the pipeline shuffles
    return model


@pytest.mark.parametrize("kind", KINDS)
def test_kind_round_trips_through_keras_and_exports_every_mode_verified(kind, tmp_path):
    model = _trained(kind)
    images, labels = next(iter(data.digits("validation", image_size=16, batch_size=96)))
    images, labels = images.numpy(), labels.numpy()
    path = tmp_path / f"{kind}.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_layer("patch_encoder").position_embedding_kind == kind
    expected = np.asarray(model.predict(images, verbose=0))
    np.testing.assert_array_equal(np.asarray(loaded.predict(images, verbose=0)), expected)
    assert (expected.argmax(-1) == labels).mean() >= 0.75  # trained: a real judge of quantisation, not chance

    out = tmp_path / "export"
    try:
        export_all(loaded, str(out), formats=FORMATS, quantizations=QUANTIZATIONS,
                   onnx_quantization=ONNX_QUANTIZATIONS, calibration_data="digits", measure_latency=False,
                   mediapipe=False)
        error = None
    except VerificationError as e:  # names every artifact outside its bar; the report is written first
        error = e
    report = json.loads((out / "report.json").read_text())
    for row in report["artifacts"]:  # the measured table (pytest -s): kind, artifact, figures against the bar
        figures = {k: round(row[k], 4) for k in ("keras_accuracy", "decisive_top1_agreement", "accuracy_drop")
                   if k in row}
        print(kind, row["format"], row["quantization"], figures, row["tolerance"],
              "passed" if row["passed"] else "FAILED")
    assert error is None, str(error)
    assert report["num_verification_images"] == min(VERIFY_SAMPLES, 360)
    planned = [("saved_model", "float32"), *[("tflite", q) for q in QUANTIZATIONS],
               *[("onnx", q) for q in ONNX_QUANTIZATIONS]]
    rows = {(row["format"], row["quantization"]): row for row in report["artifacts"]}
    assert sorted(rows) == sorted(planned)
    for (fmt, q), row in rows.items():
        assert row["passed"] and not row["failures"], row
        assert row["tolerance"] == TOLERANCES[q]
        for figure, bar in TOLERANCES[q].items():
            if figure in ("relative_max_abs_diff", "accuracy_drop"):
                assert row[figure] <= bar, (fmt, q, figure, row[figure])
            else:
                assert row[figure] >= bar, (fmt, q, figure, row[figure])
        assert os.path.exists(out / artifact_file(fmt, q))
