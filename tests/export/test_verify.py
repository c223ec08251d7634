import numpy as np
import pytest

from export import export_saved_model, export_tflite
from export.tolerances import TOKEN_TOLERANCES, TOLERANCES, compare, failures
from export.verify import Artifact, VerificationError, verify


def test_compare_figures_by_hand():
    ref = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 4.0]], "float32")
    out = np.array([[1.0, 0.5], [0.0, 2.0], [4.0, 3.0]], "float32")
    f = compare(ref, out, labels=[0, 1, 1])
    assert f["max_abs_diff"] == pytest.approx(1.0)
    assert f["relative_max_abs_diff"] == pytest.approx(1.0 / 4.0)
    assert f["mean_abs_diff"] == pytest.approx(2.5 / 6)
    cos0 = 1.0 / np.sqrt(1.25)
    cos2 = 24.0 / 25.0
    assert f["cosine"] == pytest.approx((cos0 + 1.0 + cos2) / 3)
    assert f["top1_agreement"] == pytest.approx(2 / 3)
    # the flip of row 2: Keras preferred class 1 by 1.0 = 25% of that row's largest |output|: decisive
    assert f["decisive_top1_agreement"] == pytest.approx(2 / 3) and f["near_tie_flips"] == 0
    assert f["keras_accuracy"] == pytest.approx(1.0) and f["accuracy"] == pytest.approx(2 / 3)
    assert f["accuracy_drop"] == pytest.approx(1 / 3)
    assert f["nonfinite_outputs"] == 0


def test_a_near_tie_flip_is_not_a_decisive_flip():
    """Issue 12: the float16 file flipped a near-tie (top logits 0.002 apart, error 0.0087)."""
    ref = np.array([[10.7, 10.698, 0.0], [5.0, 1.0, 0.0]], "float32")
    out = np.array([[10.6955, 10.7037, 0.0], [1.0, 5.0, 0.0]], "float32")
    f = compare(ref, out)
    assert f["top1_agreement"] == 0.0
    assert f["near_tie_flips"] == 1 and f["decisive_top1_agreement"] == 0.5
    assert failures(f, "float16") == ["decisive_top1_agreement = 0.5 (needs >= 0.99)"]
    assert failures(compare(ref, np.array([[10.6955, 10.7037, 0.0], [5.0, 1.0, 0.0]], "float32")), "float16") == []


@pytest.mark.parametrize("bad", ["nan", "inf", "half-nan"])
@pytest.mark.parametrize("quantization", ["float32", "float16", "dynamic_int8", "int8", "full_integer_int8"])
def test_non_finite_outputs_fail_every_mode(bad, quantization):
    """Issue 17: NaN > tolerance is False, so an all-NaN file used to pass with cosine 1.0."""
    ref = np.array([[1.0, 2.0], [3.0, -1.0]], "float32")
    out = ref.copy()
    if bad == "nan":
        out[:] = np.nan
    elif bad == "inf":
        out[:] = np.inf
    else:
        out[0] = np.nan
    f = compare(ref, out, labels=[1, 0])
    broken = failures(f, quantization)
    assert broken and broken[0].startswith("outputs are not finite: ")
    assert f["cosine"] is None and f["nonfinite_outputs"] == (2 if bad == "half-nan" else 4)
    assert f["accuracy"] < f["keras_accuracy"]  # a NaN row never counts as a right answer


def test_failures_against_each_tolerance():
    assert failures({"relative_max_abs_diff": 3e-5}, "float32") == ["relative_max_abs_diff = 3e-05 (needs <= 2e-05)"]
    assert failures({"relative_max_abs_diff": 1e-6}, "float32") == []
    assert failures({"decisive_top1_agreement": 0.985}, "float16") == ["decisive_top1_agreement = 0.985 (needs >= 0.99)"]
    assert failures({"decisive_top1_agreement": 0.99, "accuracy_drop": 0.03}, "full_integer_int8") == [
        "accuracy_drop = 0.03 (needs <= 0.02)"]
    # the phone-CPU int8 file (issue 45) is held to the same bars (one set per name, ONNX's int8 file's too)
    assert failures({"decisive_top1_agreement": 0.965, "accuracy_drop": 0.025}, "int8") == [
        "decisive_top1_agreement = 0.965 (needs >= 0.97)", "accuracy_drop = 0.025 (needs <= 0.02)"]
    assert failures({"decisive_top1_agreement": 0.97, "accuracy_drop": 0.02}, "int8") == []
    assert failures({"decisive_top1_agreement": 0.97, "accuracy_drop": 0.01}, "int16x8") == []
    assert failures({"decisive_top1_agreement": 0.96, "accuracy_drop": 0.01}, "int16x8") == [
        "decisive_top1_agreement = 0.96 (needs >= 0.97)"]  # full_integer_int8's bar since the min/max calibration
    assert failures({"decisive_top1_agreement": 0.94, "accuracy_drop": 0.031}, "weight_only_int4") == [
        "decisive_top1_agreement = 0.94 (needs >= 0.95)", "accuracy_drop = 0.031 (needs <= 0.03)"]
    from export.onnx_quantization import ONNX_QUANTIZATIONS
    from export.tflite import QUANTIZATIONS

    # every TFLite and ONNX mode has its bar (the modes both formats have share it), and nothing else does
    assert set(TOLERANCES) == set(TOKEN_TOLERANCES) == set(QUANTIZATIONS) | set(ONNX_QUANTIZATIONS)
    assert TOLERANCES["float32_fused"] == TOLERANCES["float32"]  # a float32 file in fused kernels: float32's bar


@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_the_float32_bar_scales_with_the_logits(scale):
    """Issue 12: an absolute 1e-4 passed wrong files with small logits and failed right ones with large logits."""
    rng = np.random.default_rng(0)
    ref = (rng.normal(size=(64, 10)) * scale).astype("float32")
    rounding = ref * (1 + rng.uniform(-1e-6, 1e-6, ref.shape)).astype("float32")  # a correct export: reordered sums
    wrong = ref + 0.01 * scale * rng.normal(size=ref.shape).astype("float32")  # a wrong weight: 1% of the scale
    assert failures(compare(ref, rounding), "float32") == []
    assert failures(compare(ref, wrong), "float32")
    if scale == 1e-3:  # the old absolute bar would have passed this wrong file
        assert compare(ref, wrong)["max_abs_diff"] < 1e-4
    if scale == 300.0:  # ... and failed this right one
        assert compare(ref, rounding)["max_abs_diff"] > 1e-4


def test_passing_artifacts(trained_vit, tmp_path):
    model, _, images, labels = trained_vit
    sm = export_saved_model(model, str(tmp_path / "sm"))
    tfl = export_tflite(model, str(tmp_path / "m.tflite"))
    rows = verify(model, [Artifact("sm", "saved_model", sm), Artifact("tfl", "tflite", tfl)], images, labels)
    for row in rows:
        assert row["passed"] and row["relative_max_abs_diff"] < 2e-5 and row["top1_agreement"] == 1.0
        assert row["accuracy"] == row["keras_accuracy"] and row["latency_ms_batch1"] > 0 and row["size_mb"] > 0


def test_an_artifact_of_other_weights_fails_and_is_named(trained_vit, tmp_path):
    """An artifact that computes something else (here: a perturbed head) must not pass."""
    model, _, images, labels = trained_vit
    head = model.get_layer("predictions")
    kernel = head.kernel.numpy()
    # 0.05 more on one weight per class: adding one amount to every logit would be cancelled by the softmax
    head.kernel.assign(kernel + np.eye(*kernel.shape, dtype="float32") * 0.05)
    try:
        path = export_tflite(model, str(tmp_path / "other.tflite"))
    finally:
        head.kernel.assign(kernel)
    with pytest.raises(VerificationError, match=r"other.tflite: relative_max_abs_diff = .* \(needs <= 2e-05\)"):
        verify(model, [Artifact("other.tflite", "tflite", path)], images, labels, measure_latency=False)
