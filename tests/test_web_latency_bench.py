"""benchmarks.web_latency on make demo's architecture: every runtime, in the browser and in Python, times the files."""

import pytest

pytestmark = pytest.mark.export


def test_every_runtime_times_the_demo_architecture(tmp_path):
    from benchmarks.web_latency import main, measure, table

    rows = measure(["demo"], str(tmp_path / "absent.keras"), str(tmp_path), rounds=1, runs=2, progress=lambda line: None)
    assert {(r["runtime"], r["threads"]) for r in rows} == {
        ("LiteRT (Python, XNNPACK)", 1), ("LiteRT (Python, XNNPACK)", 2), ("onnxruntime (Python)", 1),
        ("onnxruntime (Python)", 2), ("MediaPipe Tasks for Web (WASM)", 1), ("onnxruntime-web (WASM)", 1),
        ("onnxruntime-web (WASM)", 2)}
    assert all(r["ms"] > 0 and r["source"].startswith("make demo's architecture") for r in rows)
    assert {r["file"] for r in rows} == {"demo.tflite", "demo.onnx"}
    assert len(table(rows).splitlines()) == 2 + len(rows)
    with pytest.raises(SystemExit) as exit_info:
        main(["--models", "b16"])
    assert exit_info.value.code == 2
