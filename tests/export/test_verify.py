import numpy as np
import pytest

from export import export_saved_model, export_tflite
from export.verify import TOLERANCES, Artifact, VerificationError, compare, failures, verify


def test_compare_figures_by_hand():
    ref = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]], "float32")
    out = np.array([[1.0, 0.5], [0.0, 2.0], [4.0, 3.0]], "float32")
    f = compare(ref, out, labels=[0, 1, 1])
    assert f["max_abs_diff"] == pytest.approx(1.0)
    assert f["mean_abs_diff"] == pytest.approx(2.5 / 6)
    cos0 = 1.0 / np.sqrt(1.25)
    cos2 = 24.0 / 25.0
    assert f["cosine"] == pytest.approx((cos0 + 1.0 + cos2) / 3)
    assert f["top1_agreement"] == pytest.approx(2 / 3)
    assert f["keras_accuracy"] == pytest.approx(1.0) and f["accuracy"] == pytest.approx(2 / 3)
    assert f["accuracy_drop"] == pytest.approx(1 / 3)


def test_failures_against_each_tolerance():
    assert failures({"max_abs_diff": 2e-4}, "float32") == ["max_abs_diff = 0.0002 (needs <= 0.0001)"]
    assert failures({"max_abs_diff": 5e-5}, "float32") == []
    assert failures({"top1_agreement": 0.985}, "float16") == ["top1_agreement = 0.985 (needs >= 0.99)"]
    assert failures({"top1_agreement": 0.99, "accuracy_drop": 0.03}, "int8") == ["accuracy_drop = 0.03 (needs <= 0.02)"]
    assert set(TOLERANCES) == {"float32", "float16", "dynamic_int8", "int8"}


def test_passing_artifacts(trained_vit, tmp_path):
    model, _, images, labels = trained_vit
    sm = export_saved_model(model, str(tmp_path / "sm"))
    tfl = export_tflite(model, str(tmp_path / "m.tflite"))
    rows = verify(model, [Artifact("sm", "saved_model", sm), Artifact("tfl", "tflite", tfl)], images, labels)
    for row in rows:
        assert row["passed"] and row["max_abs_diff"] < 1e-4 and row["top1_agreement"] == 1.0
        assert row["accuracy"] == row["keras_accuracy"] and row["latency_ms_batch1"] > 0 and row["size_mb"] > 0


def test_an_artifact_of_other_weights_fails_and_is_named(trained_vit, tmp_path):
    """An artifact that computes something else (here: a perturbed head) must not pass."""
    model, _, images, labels = trained_vit
    head = model.get_layer("predictions")
    kernel = head.kernel.numpy()
    head.kernel.assign(kernel + 0.01)
    try:
        path = export_tflite(model, str(tmp_path / "other.tflite"))
    finally:
        head.kernel.assign(kernel)
    with pytest.raises(VerificationError, match=r"other.tflite: max_abs_diff = .* \(needs <= 0.0001\)"):
        verify(model, [Artifact("other.tflite", "tflite", path)], images, labels, measure_latency=False)
