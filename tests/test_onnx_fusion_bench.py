"""benchmarks.onnx_fusion on a tiny ViT: what onnxruntime's transformer optimizer fuses in each float32 file, and
that a fused file computes what the plain one does."""

import numpy as np
import pytest

pytestmark = pytest.mark.export


def test_the_optimizer_fuses_hf_layer_norms_and_gelus_and_nothing_of_tf2onnx(tmp_path, monkeypatch):
    import onnxruntime

    from benchmarks import onnx_fusion

    layers = 2
    monkeypatch.setattr(onnx_fusion, "VARIANTS", {"ti": (32, layers, 2, 64)})
    monkeypatch.setattr(onnx_fusion, "IMAGE", 32)
    monkeypatch.setattr(onnx_fusion, "PATCH", 8)
    monkeypatch.setattr(onnx_fusion, "CLASSES", 10)
    rows = onnx_fusion.measure(["ti"], str(tmp_path), rounds=1, runs=1, progress=lambda line: None)
    fused = {r["file"]: r["fused"] for r in rows}
    assert set(fused) == {"keras_vit", "keras_vit fused", "keras_vit rewritten", "keras_vit rewritten fused", "HF",
                          "HF fused"}
    assert fused["keras_vit fused"] == {}  # benchmarks/findings/onnx-fusion-first-look.md: none of its patterns matches tf2onnx's graph
    # Two LayerNorms per block and the encoder's, one GELU per block: rewritten, then fused like HF's
    assert fused["keras_vit rewritten"] == {"LayerNormalization (rewritten)": 2 * layers + 1, "GELU (reordered)": layers}
    assert fused["keras_vit rewritten fused"] == {"SkipLayerNormalization": 2 * layers, "LayerNormalization": 1,
                                                  "Gelu": layers}
    # Two residual Adds + LayerNorms per block, one GELU per block, the final LayerNorm
    assert fused["HF fused"] == {"SkipLayerNormalization": 2 * layers, "BiasGelu": layers, "LayerNormalization": 1}
    assert all(ms > 0 for r in rows for ms in r["ms"].values()) and len(rows[0]["ms"]) == 4
    assert len(onnx_fusion.table(rows).splitlines()) == 2 + len(rows)

    images = np.random.default_rng(1).uniform(-1, 1, (3, 3, 32, 32)).astype("float32")
    outputs = [onnxruntime.InferenceSession(str(tmp_path / f"ti_HF{suffix}.onnx"), providers=["CPUExecutionProvider"])
               .run(None, {"pixel_values": images})[0] for suffix in ("", "_fused")]
    assert outputs[0].shape == (3, 10)
    np.testing.assert_allclose(outputs[1], outputs[0], rtol=1e-4, atol=1e-5)
    # keras_vit's rewritten and fused files compute what its plain file does (random head and LayerNorms: the
    # probabilities are far from uniform, and every LayerNorm has its beta)
    nhwc = images.transpose(0, 2, 3, 1)
    runs = {name: onnxruntime.InferenceSession(str(tmp_path / f"ti_{name}.onnx"), providers=["CPUExecutionProvider"])
            for name in ("keras_vit", "keras_vit_rewritten", "keras_vit_rewritten_fused")}
    probs = {name: run.run(None, {run.get_inputs()[0].name: nhwc})[0] for name, run in runs.items()}
    assert probs["keras_vit"].shape == (3, 10) and probs["keras_vit"].max() > 0.5  # not uniform (0.1)
    for name in ("keras_vit_rewritten", "keras_vit_rewritten_fused"):
        np.testing.assert_allclose(probs[name], probs["keras_vit"], rtol=1e-5, atol=1e-6)

    with pytest.raises(SystemExit) as exit_info:
        onnx_fusion.main(["--variants", "xl"])
    assert exit_info.value.code == 2
