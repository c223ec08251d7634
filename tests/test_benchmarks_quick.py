"""`make bench`'s quick run end to end (its own module: 3.6 minutes of one process's time, issue 42): every
implementation and row is measured and reported (no time is asserted: speed lives in benchmarks/)."""

import json
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_quick_run_reports_every_row(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--sections", "train,infer", "--output-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads((tmp_path / "latest.json").read_text())
    impls = {r["implementation"] for r in data["rows"]}
    assert impls == {"keras_vit", "keras-hub", "HF transformers (PyTorch)", "HF transformers (torch.compile)",
                     "keras_vit (JAX)", "keras_vit (PyTorch backend)"}
    # 2 precisions x (XLA on/off x 2 Keras on TensorFlow + keras_vit on JAX and PyTorch + HF eager and compiled)
    assert len([r for r in data["rows"] if r["section"] == "train"]) == 16
    assert len([r for r in data["rows"] if r["section"] == "infer"]) == 2 * 6  # batch 1 and 8
    assert all(r["images_per_s"] > 0 and 0 < r["fraction_of_peak"] < 1.5 for r in data["rows"])
    assert data["peaks"]["float32"] > 0 and data["headline"] and data["best_settings"]
    assert data["quick"] is True and data["failed_jobs"] == 0 and data["sections"] == ["train", "infer"]
    assert data["jobs_at_once"] == 2  # a smoke run: two jobs share the CPU (a full run measures one at a time)
    assert "| keras_vit | tiny |" in (tmp_path / "latest.md").read_text()
