"""The hybrid ResNet+ViT goes through `export` like any other keras_vit model (issue 5)."""

import json

import numpy as np
import pytest

import keras_vit
from export import export_all

pytestmark = pytest.mark.export


def test_hybrid_exports_to_every_format_and_matches_keras(tmp_path):
    model = keras_vit.VisionTransformer(
        patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, resnet_num_layers=(1, 1),
        input_shape=(16, 16, 3), classes=10, classifier_activation=None, name="tiny_hybrid",
    )
    rng = np.random.default_rng(0)
    head = model.get_layer("predictions")
    head.kernel.assign(rng.normal(0, 0.5, head.kernel.shape).astype("float32"))  # a head that is not all zeros
    export_all(model, tmp_path / "out", quantizations=["float32", "float16"], calibration_data="digits",
                        measure_latency=False)
    saved = json.loads((tmp_path / "out" / "report.json").read_text())
    artifacts = {a["name"]: a for a in saved["artifacts"]}
    assert set(artifacts) == {"saved_model", "model_float32.tflite", "model_float16.tflite", "model.onnx"}
    assert all(a["passed"] for a in artifacts.values()), artifacts
    for name in ("saved_model", "model_float32.tflite", "model.onnx"):
        assert artifacts[name]["max_abs_diff"] < 1e-4, artifacts[name]
    for name in ("model_float32.tflite", "model_float16.tflite"):  # issue 16: the hybrid runs in MediaPipe too
        assert artifacts[name]["mediapipe_top1_agreement"] >= 0.95, artifacts[name]
        assert artifacts[name]["mediapipe_max_score_sum_error"] <= 1e-3
