"""`make demo` as the README states it (3 of 3): the demo model's files in the browser, and the guides' blocks
that need `make demo`'s files, run on this run's demo (tests/demo_run.py)."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

from export.images import load_data
from export.verify import Artifact
from export.web_check import check_in_browser
from tests import demo_run, doc_blocks

pytestmark = [pytest.mark.slow, pytest.mark.export]


def test_demo_files_in_the_browser(tmp_path_factory):
    """Issue 31 on the demo model: the float32 and int8 .tflite files `make demo` wrote, in MediaPipe Tasks for Web,
    and its .onnx in onnxruntime-web, in headless Chromium (`export.web_check.check_in_browser`, what `--web-check`
    runs), give Keras' top-1 on the 360 held-out digits within the files' bars; the page `--web` wrote (as
    `make demo` does) holds the float32 file. (`--web-check` itself, end to end: tests/export/test_web.py.)"""
    export, _ = demo_run.exported(tmp_path_factory)
    model = keras.saving.load_model(demo_run.trained(tmp_path_factory) / "model.keras")
    _, images, labels, _ = load_data("digits", model)  # the export's own verification images, as it read them
    assert len(images) == 360
    names = {"model_float32.tflite": ("tflite", "float32"), "model_int8.tflite": ("tflite", "int8"),
             "model.onnx": ("onnx", "float32")}
    artifacts = [Artifact(name, fmt, str(export / name), q) for name, (fmt, q) in names.items()]
    rows = [{"name": a.name, "scores": "probabilities", "passed": True} for a in artifacts]
    check_in_browser(model, artifacts, rows, images, labels, measure_latency=False)
    rows = {row["name"]: row for row in rows}
    for name, row in rows.items():
        assert row["passed"] and row["web_failures"] == [] and "web_unsupported" not in row, row
        assert abs(row["web_accuracy"] - row["web_keras_accuracy"]) <= 0.01, row
    for name in ("model_float32.tflite", "model.onnx"):
        assert rows[name]["web_relative_max_abs_diff"] <= 2e-5 and rows[name]["web_top1_agreement"] == 1.0, rows[name]
    assert rows["model_int8.tflite"]["web_decisive_top1_agreement"] >= 0.97
    assert (export.parent / "web" / "model_float32.tflite").read_bytes() == (export / "model_float32.tflite").read_bytes()


def test_demo_guide_blocks_run_on_the_demo_files(tmp_path_factory, tmp_path):
    """Runs the guides' blocks that need `make demo`'s files (`after: make demo`, tests/doc_blocks.py), a process
    a page, in a folder where runs/demo is this run's demo (its training and export) and digit.png a digit."""
    out = demo_run.trained(tmp_path_factory)
    export, _ = demo_run.exported(tmp_path_factory)
    work = tmp_path / "guide"
    demo = work / "runs" / "demo"
    demo.mkdir(parents=True)
    for entry in os.listdir(out):
        os.symlink(out / entry, demo / entry)
    os.symlink(export, demo / "export")
    digit = np.zeros((16, 16), "uint8")
    digit[3:13, 7:9] = 255  # a "1", as a grey PNG: a digit scan (issue 43: MediaPipe's create_from_file refused it)
    Image.fromarray(digit).save(work / "digit.png")
    pages = {page.name: [b for b in doc_blocks.blocks(page) if b.after_demo] for page in doc_blocks.PAGES}
    pages = {name: page_blocks for name, page_blocks in pages.items() if page_blocks}
    assert {name: len(page_blocks) for name, page_blocks in pages.items()} == {"app_contract.md": 4, "export.md": 1}
    for page_blocks in pages.values():  # app_contract.md's checks: the labels read back, the input's shape, and an
        # EXIF-6 photo's class in LiteRT's Interpreter and in MediaPipe: keras_vit.data's (tests/doc_setup.exif_photo)
        result = doc_blocks.run(page_blocks, work, timeout=600)
        # each ends with MediaPipe's block: its classifier is closed, so nothing prints "Exception ignored" at exit
        assert "Exception ignored" not in result.stderr and "Category(" in result.stdout, result.stderr[-2000:]
