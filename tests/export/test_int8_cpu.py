"""Issue 45: the phone-CPU `int8` file keeps a ViT's decisions where one int8 scale per tensor cannot.

A model with a trained ViT's post-LayerNorm outlier channels is made exactly (`with_outlier_channels`: the float
model is unchanged); every default file must still pass, `full_integer_int8` (every op int8) must not, and "what to
try" must name the measured cause. The calibration manifest, the stability check, per-class agreement and the
sensitivity pass are checked on the same export.
"""

import json
import os
import re

import numpy as np
import pytest

from export import sensitivity
from export._cli_text import what_to_try
from export.calibration import STABILITY_HALF, image_list_sha256, stability, weak_classes
from export.litert_quantization import quantize_with_ranges
from export.output_folder import manifest_file
from export.pipeline import export_all
from export.profile import tflite_profile
from export.reparameterize import balance_layer_norms, check_exact, outlier_ratio, with_outlier_channels
from export.signature import ServingGraph
from export.tflite import DEFAULT_QUANTIZATIONS, convert
from export.tolerances import compare
from export.verify import VerificationError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outlier_vit(trained_vit):
    model, _, images, _ = trained_vit
    return with_outlier_channels(model), images


@pytest.fixture(scope="module")
def exported(outlier_vit, tmp_path_factory):
    """The outlier model exported in the default modes plus full_integer_int8, on digits; (report, folder)."""
    model, _ = outlier_vit
    folder = tmp_path_factory.mktemp("outliers")
    with pytest.raises(VerificationError, match="model_full_integer_int8.tflite"):
        export_all(model, str(folder), quantizations=(*DEFAULT_QUANTIZATIONS, "full_integer_int8"),
                   calibration_data="digits", mediapipe=False, measure_latency=False)
    with open(folder / "report.json") as f:
        return json.load(f), folder


def test_outlier_channels_are_made_exactly_and_measured(trained_vit, outlier_vit):
    model, _, images, _ = trained_vit
    outliers, _ = outlier_vit
    assert check_exact(model, outliers, images) < 1e-5  # the same function
    plain, wide = outlier_ratio(model, images), outlier_ratio(outliers, images)
    assert plain < 5 and wide > 25, (plain, wide)  # 4 channels x 30 over the median one
    # the rewrite from the weights alone (dynamic_int8's) undoes them, and is exact too
    balanced = balance_layer_norms(outliers, None)
    assert check_exact(outliers, balanced, images) < 1e-5 and outlier_ratio(balanced, images) < wide / 5


def test_every_default_file_passes_on_outlier_channels_and_full_integer_int8_does_not(exported):
    report, folder = exported
    rows = {row["quantization"] + "." + row["format"]: row for row in report["artifacts"]}
    for q in DEFAULT_QUANTIZATIONS:
        assert rows[f"{q}.tflite"]["passed"], rows[f"{q}.tflite"]["failures"]
    assert rows["int8.tflite"]["decisive_top1_agreement"] >= 0.98  # the bar for this model
    full = rows["full_integer_int8.tflite"]
    assert not full["passed"] and full["decisive_top1_agreement"] < 0.97
    assert not os.path.exists(folder / "model_full_integer_int8.tflite")


def test_what_to_try_names_the_outlier_channels_and_the_modes_that_hold_them(exported):
    report, _ = exported
    found = report["quantization_diagnosis"]
    assert found["files"] == ["model_full_integer_int8.tflite"] and found["outlier_channels"]
    assert found["outlier_ratio"] > 25 and not found["near_chance"]
    text = what_to_try(report)
    assert "outlier channels after its LayerNorms" in text and "use int8 (phone CPUs" in text
    assert "int8_mixed16 (NPUs" in text and "train the model longer" not in text and "calibrate on" not in text


def test_what_to_try_names_a_near_chance_model_and_too_few_images():
    rows = [{"name": "model_int8.tflite", "format": "tflite", "quantization": "int8", "passed": False,
             "failures": ["decisive_top1_agreement = 0.5 (needs >= 0.97)"]}]
    near = {"files": ["model_int8.tflite"], "outlier_ratio": 2.0, "outlier_channels": False, "calibration_images": 200,
            "unstable": [], "keras_accuracy": 0.14, "chance_accuracy": 0.1, "near_chance": True}
    text = what_to_try({"artifacts": rows, "quantization_diagnosis": near})
    assert "train the model first" in text and "14.0%" in text and "near chance (10.0%)" in text
    few = {**near, "keras_accuracy": 0.9, "near_chance": False, "calibration_images": 40}
    text = what_to_try({"artifacts": rows, "quantization_diagnosis": few})
    assert "calibrate on more images" in text and "40 calibrated it" in text and "train the model" not in text


def test_the_int8_file_is_int8_in_its_matmuls_float_elsewhere_and_xnnpack_runs_it_whole(exported):
    report, folder = exported
    row = next(r for r in report["artifacts"] if r["name"] == "model_int8.tflite")
    profile = tflite_profile(row["path"], num_threads=1, measure_latency=False)
    ops = {r["op"]: r for r in profile["ops"]}
    for op in ("FULLY_CONNECTED", "BATCH_MATMUL"):
        assert ops[op]["output_types"] == ["int8"], ops[op]
    for op in ("SOFTMAX", "GELU", "RSQRT", "MEAN"):
        assert ops[op]["output_types"] == ["float32"], ops[op]
    assert profile["xnnpack_partitions"] <= 3, profile
    off = {r["op"] for r in profile["ops"] if r["off_delegate"]}
    assert off <= {"STRIDED_SLICE"}, off  # the class token's slice, as in the float32 file


def test_a_manifest_lies_beside_every_calibrated_file_with_the_stability_check(exported, trained_vit):
    report, folder = exported
    row = next(r for r in report["artifacts"] if r["name"] == "model_int8.tflite")
    with open(manifest_file(folder / "model_int8.tflite")) as f:
        manifest = json.load(f)
    assert manifest == row["calibration"]
    assert manifest["images"] == 200 and manifest["source"] == "digits"
    assert manifest["preprocessing"]["image_size"] == [16, 16] and manifest["preprocessing"]["input_range"] == [-1, 1]
    stable = manifest["stability"]
    assert stable["checked"] and stable["half_images"] == [100, 100] and stable["stable"]
    assert stable["figure"] == "decisive_top1_agreement" and stable["value"] >= stable["bar"] == 0.97
    # the hash is of the images as calibrated: the first 200 training digits, unshuffled
    from keras_vit import data

    digits = np.concatenate([x for x, _ in data.digits("train", image_size=16, batch_size=64, shuffle=False)
                             .as_numpy_iterator()])[:200]
    assert manifest["image_list_sha256"] == image_list_sha256(digits)
    # no manifest for an uncalibrated file, and none left by the failed one
    assert not os.path.exists(manifest_file(folder / "model_dynamic_int8.tflite"))
    assert not os.path.exists(manifest_file(folder / "model_full_integer_int8.tflite"))


def test_the_stability_check_needs_two_halves_of_fifty_and_says_so():
    calls = []
    few = stability(lambda half: calls.append(len(half)), np.zeros((2 * STABILITY_HALF - 1, 4, 4, 3)), "logits",
                    "int8")
    assert not few["checked"] and "99 calibration images" in few["reason"] and "at least 100" in few["reason"]
    assert calls == []
    outputs = iter([np.eye(10)[[0, 1, 2, 3]], np.eye(10)[[0, 1, 2, 4]]])  # the two files differ on one of 4
    found = stability(lambda half: next(outputs), np.zeros((101, 4, 4, 3)), "logits", "int8")
    assert found["checked"] and found["half_images"] == [51, 50]
    assert found["value"] == 0.75 and found["bar"] == 0.97 and not found["stable"]


def test_per_class_agreement_shows_the_class_that_flips():
    reference = np.eye(3)[[0] * 20 + [1] * 20 + [2] * 20] * 5
    outputs = reference.copy()
    outputs[40:50] = np.eye(3)[[0] * 10] * 5  # half of class 2 flips; 83% overall
    figures = compare(reference, outputs, kind="logits")
    assert figures["per_class_agreement"] == {"0": [20, 1.0], "1": [20, 1.0], "2": [20, 0.5]}
    row = {**figures, "tolerance": {"decisive_top1_agreement": 0.97}}
    assert weak_classes(row) == ["class 2: 50.0% agreement on its 20 images (bar 97%)"]


def test_the_sensitivity_pass_keeps_the_most_sensitive_matmuls_in_float(trained_vit):
    model, _, images, _ = trained_vit
    with ServingGraph(model, batch_size=1, scores="logits") as graph:
        float_content = convert(graph, "float32")
    noise = np.random.default_rng(0).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    poor, ranges = quantize_with_ranges(float_content, "int8", noise)  # calibrated on noise: ranges off
    order = sensitivity.ranking(float_content, poor, images[:4])
    names = [name for name, _ in order]
    assert len(names) == 10 and all(a >= b for (_, a), (_, b) in zip(order, order[1:]))  # 7 FC, 2 BMM, the head
    asked = []

    def requantize(keep_float):
        asked.append(keep_float)
        return quantize_with_ranges(float_content, "int8", noise, keep_float=keep_float, calibration=ranges)[0]

    first = sensitivity.agreement(sensitivity.outputs(float_content, images), poor, images, "logits")
    assert first < sensitivity.TARGET, first  # what the pass is for
    content, kept = sensitivity.keep_sensitive_in_float(float_content, poor, images, requantize, "logits")
    assert asked[0] == tuple(f"^{re.escape(n)};$" for n in names[:2]) and kept == names[:len(kept)]
    assert kept, "no candidate beat the first file"
    from ai_edge_litert.interpreter import Interpreter

    dtypes = {d["name"]: d["dtype"] for d in Interpreter(model_content=content).get_tensor_details()}
    before = {d["name"]: d["dtype"] for d in Interpreter(model_content=poor).get_tensor_details()}
    for name in kept:  # those matmuls now output float32, where the first file's output int8
        assert before[name] == np.int8 and dtypes[name] == np.float32, name
    assert sensitivity.agreement(sensitivity.outputs(float_content, images), content, images, "logits") > first
