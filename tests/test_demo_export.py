"""`make demo` as the README states it (2 of 3): export the demo model to every format and mode, verify each
file, and meet the quality bars (sizes, agreement, MediaPipe, the class names in every file)."""

import pytest

from tests import demo_run

pytestmark = [pytest.mark.slow, pytest.mark.export]


def test_demo_export_meets_the_readme_quality_bars(tmp_path_factory):
    export, table = demo_run.exported(tmp_path_factory)
    assert "| model_int8.tflite |" in table
    report, rows = demo_run.report_rows(export)
    assert report["num_verification_images"] == 360 and all(r["passed"] for r in rows.values())
    assert report["dtype_policy"] == "float32"
    assert set(rows) == {"saved_model", "model.onnx", "model_dynamic_int8.onnx", "model_int8.onnx"} | {
        f"model_{q}.tflite" for q in ("float32", "float16", "dynamic_int8", "int8", "full_integer_int8", "int16x8",
                                        "weight_only_int8", "weight_only_int4", "dynamic_int4")}
    for name in ("saved_model", "model_float32.tflite", "model.onnx"):
        assert rows[name]["relative_max_abs_diff"] <= 2e-5, rows[name]
    assert rows["model_float16.tflite"]["decisive_top1_agreement"] >= 0.99
    assert rows["model_dynamic_int8.tflite"]["decisive_top1_agreement"] >= 0.98
    for name in ("model_int8.tflite", "model_full_integer_int8.tflite"):  # the phone-CPU and the NPU int8 files
        int8 = rows[name]
        assert int8["decisive_top1_agreement"] >= 0.97 and int8["accuracy_drop"] < 0.02, int8
    float32_size = rows["model_float32.tflite"]["size_mb"]
    # README: at most 0.3x for dynamic-range int8, 0.31x for the integer-only full-int8 file (measured 0.303x, when
    # it was named int8)
    for name, bar in (("model_full_integer_int8.tflite", 0.31), ("model_dynamic_int8.tflite", 0.3)):
        assert rows[name]["size_mb"] <= bar * float32_size, (name, rows[name]["size_mb"], float32_size)
    # issue 11's new modes: README bars (export.tolerances.TOLERANCES) and sizes against the float32 file
    # sizes measured 0.309x, 0.287x and 0.165x the float32 file; ONNX 0.302x and 0.319x the float32 ONNX file
    for name, agreement, drop, size in (("model_int16x8.tflite", 0.97, 0.02, 0.32),
                                        ("model_weight_only_int8.tflite", 0.99, None, 0.3),
                                        ("model_weight_only_int4.tflite", 0.95, 0.03, 0.2),
                                        ("model_dynamic_int4.tflite", 0.95, 0.03, 0.2),
                                        ("model_dynamic_int8.onnx", 0.98, None, None),
                                        ("model_int8.onnx", 0.97, 0.02, None)):
        row = rows[name]
        assert row["decisive_top1_agreement"] >= agreement, row
        assert drop is None or row["accuracy_drop"] < drop, row
        assert size is None or row["size_mb"] <= size * float32_size, (name, row["size_mb"], float32_size)
    onnx_size = rows["model.onnx"]["size_mb"]
    for name in ("model_dynamic_int8.onnx", "model_int8.onnx"):  # README: at most 0.35x the float32 ONNX file
        assert rows[name]["size_mb"] <= 0.35 * onnx_size, (name, rows[name]["size_mb"], onnx_size)
    # issue 16 on the demo model: MediaPipe's ImageClassifier within 1 point of Keras for every .tflite file,
    # scores summing to 1 within 1e-3 (the int8 files' softmax runs in float32; int16x8's output is int16-rounded)
    tflite_rows = [row for name, row in rows.items() if name.endswith(".tflite")]
    assert len(tflite_rows) == 9
    for row in tflite_rows:
        assert abs(row["mediapipe_accuracy"] - row["keras_accuracy"]) <= 0.01, row
        assert row["mediapipe_max_score_sum_error"] <= 1e-3, row

    # issue 25: the class names keras-vit-train stored travel into every file, and docs/app_contract.md's code runs
    assert report["labels_source"] == "model" and report["labels"] == [str(d) for d in range(10)]
    assert rows["model_float32.tflite"]["contract"]["app_preprocessing"] == "feed (p - 127.5) / 127.5 as float32, in [-1, 1]"
