"""`make demo` as the README states it: train on digits, export everything, verify, meet the quality bars."""

import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests import doc_blocks

pytestmark = [pytest.mark.slow, pytest.mark.export]


def run(args, timeout):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


def _makefile_flags(name):
    makefile = open(os.path.join(os.path.dirname(__file__), os.pardir, "Makefile")).read()
    return shlex.split(re.search(rf"^{name} := (.*)$", makefile, re.M).group(1))


def demo_export_flags():
    """`keras-vit-export`'s flags in `make demo`, read from the Makefile so the test runs exactly that job."""
    return _makefile_flags("DEMO_EXPORT_FLAGS")


def demo_train_flags():
    """`keras-vit-train`'s flags in `make demo` (its recipe), read from the Makefile."""
    return _makefile_flags("DEMO_TRAIN_FLAGS")


def test_demo_meets_the_readme_quality_bars(tmp_path):
    out = tmp_path / "demo"
    run(["-m", "keras_vit.train", *demo_train_flags(), "--output-dir", str(out), "--verbose", "0"], timeout=1500)
    metrics = json.loads((out / "metrics.json").read_text())
    # docs/demo.md: at least 97% held-out (98.3-98.9% on seeds 0-2 here; 97.5% on one CI machine, whose CPU rounds
    # differently: the bar keeps a margin of about three of the 360 images)
    assert metrics["accuracy"] >= 0.97, metrics
    assert metrics["recipe"] == demo_train_flags()[demo_train_flags().index("--recipe") + 1]

    table = run(["-m", "export", str(out / "model.keras"), *demo_export_flags(), "--output-dir", str(out / "export")], timeout=1500)
    assert "| model_int8.tflite |" in table
    report = json.loads((out / "export" / "report.json").read_text())
    rows = {r["name"]: r for r in report["artifacts"]}
    assert report["num_verification_images"] == 360 and all(r["passed"] for r in rows.values())
    assert report["dtype_policy"] == "float32"
    assert set(rows) == {"saved_model", "model.onnx", "model_dynamic_int8.onnx", "model_int8.onnx"} | {
        f"model_{q}.tflite" for q in ("float32", "float16", "dynamic_int8", "int8", "int16x8", "weight_only_int8", "weight_only_int4",
                                        "dynamic_int4")}
    for name in ("saved_model", "model_float32.tflite", "model.onnx"):
        assert rows[name]["relative_max_abs_diff"] <= 2e-5, rows[name]
    assert rows["model_float16.tflite"]["decisive_top1_agreement"] >= 0.99
    assert rows["model_dynamic_int8.tflite"]["decisive_top1_agreement"] >= 0.98
    int8 = rows["model_int8.tflite"]
    assert int8["decisive_top1_agreement"] >= 0.97 and int8["accuracy_drop"] < 0.02, int8
    float32_size = rows["model_float32.tflite"]["size_mb"]
    # README: at most 0.3x for dynamic-range int8, 0.31x for the integer-only full-int8 file (measured 0.303x)
    for name, bar in (("model_int8.tflite", 0.31), ("model_dynamic_int8.tflite", 0.3)):
        assert rows[name]["size_mb"] <= bar * float32_size, (name, rows[name]["size_mb"], float32_size)
    # issue 11's new modes: README bars (export.verify.TOLERANCES) and sizes against the float32 file
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
    # scores summing to 1 within 1e-3 (int8's softmax runs in float32; int16x8's output is int16-rounded)
    tflite_rows = [row for name, row in rows.items() if name.endswith(".tflite")]
    assert len(tflite_rows) == 8
    for row in tflite_rows:
        assert abs(row["mediapipe_accuracy"] - row["keras_accuracy"]) <= 0.01, row
        assert row["mediapipe_max_score_sum_error"] <= 1e-3, row

    # issue 25: the class names keras-vit-train stored travel into every file, and docs/app_contract.md's code runs
    assert report["labels_source"] == "model" and report["labels"] == [str(d) for d in range(10)]
    assert rows["model_float32.tflite"]["contract"]["app_preprocessing"] == "feed (p - 127.5) / 127.5 as float32, in [-1, 1]"
    check_in_the_browser(out)
    run_guide(tmp_path, out)


def check_in_the_browser(out):
    """Issue 31 on the demo model: its float32 and int8 .tflite files in MediaPipe Tasks for Web and its .onnx in
    onnxruntime-web, in headless Chromium, give Keras' top-1 on the 360 held-out digits within the files' bars; the
    page `--web` writes (as `make demo` does) holds the float32 file."""
    run(["-m", "export", str(out / "model.keras"), "--formats", "tflite,onnx", "--quantization", "float32,int8",
         "--onnx-quantization", "float32", "--calibration-data", "digits", "--no-latency", "--web-check",
         "--web", str(out / "web"), "--output-dir", str(out / "web_export")], timeout=1500)
    rows = {r["name"]: r for r in json.loads((out / "web_export" / "report.json").read_text())["artifacts"]}
    assert set(rows) == {"model_float32.tflite", "model_int8.tflite", "model.onnx"}
    for name, row in rows.items():
        assert row["passed"] and row["web_failures"] == [] and "web_unsupported" not in row, row
        assert abs(row["web_accuracy"] - row["web_keras_accuracy"]) <= 0.01, row
    for name in ("model_float32.tflite", "model.onnx"):
        assert rows[name]["web_relative_max_abs_diff"] <= 2e-5 and rows[name]["web_top1_agreement"] == 1.0, rows[name]
    assert rows["model_int8.tflite"]["web_decisive_top1_agreement"] >= 0.97
    assert (out / "web" / "model_float32.tflite").read_bytes() == (out / "web_export" / "model_float32.tflite").read_bytes()


def run_guide(tmp_path, out):
    """Runs the guides' blocks that need `make demo`'s files (`after: make demo`, tests/doc_blocks.py), a process
    a page, in a folder where runs/demo is this run's demo and digit.png a digit."""
    import numpy as np
    from PIL import Image

    work = tmp_path / "guide"
    (work / "runs").mkdir(parents=True)
    os.symlink(out, work / "runs" / "demo")
    digit = np.zeros((16, 16, 3), "uint8")
    digit[3:13, 7:9] = 255  # a "1"
    Image.fromarray(digit).save(work / "digit.png")
    pages = {page.name: [b for b in doc_blocks.blocks(page) if b.after_demo] for page in doc_blocks.PAGES}
    pages = {name: page_blocks for name, page_blocks in pages.items() if page_blocks}
    assert {name: len(page_blocks) for name, page_blocks in pages.items()} == {"app_contract.md": 2, "export.md": 1}
    for page_blocks in pages.values():  # app_contract.md's checks: the labels read back, the input's shape
        result = doc_blocks.run(page_blocks, work, timeout=600)
        # each ends with MediaPipe's block: its classifier is closed, so nothing prints "Exception ignored" at exit
        assert "Exception ignored" not in result.stderr and "Category(" in result.stdout, result.stderr[-2000:]
