"""The "float32_fused" ONNX file: onnxruntime's transformer optimizer on keras_vit's float32 file (issue 30, item 4)."""

import collections
import json
import os
import sys

import keras
import numpy as np
import onnx
import onnxruntime
import pytest

import export.onnx
import export.onnx_fusion
import keras_vit
from export import __main__ as cli
from export import export_onnx
from export.onnx import check_onnx
from export.onnx_fusion import FUSED_OPS, fused_nodes, rewrite_for_fusion
from export.verify import VerificationError

pytestmark = pytest.mark.export

LAYERS = 2


def _model(trained_like):
    """A 16 px ViT of `LAYERS` blocks with a random head (a zero head outputs the same for every image);
    `trained_like`: random LayerNorm betas and biases too, as after training (a fresh model's are zeros, and
    tf2onnx drops an Add of zeros)."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=LAYERS, num_heads=2, mlp_dim=64,
                                        input_shape=(16, 16, 3), classes=10)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        if weight.path.startswith("predictions") or trained_like and weight.path.endswith(("beta", "bias")):
            weight.assign(rng.normal(0.0, 0.5, weight.shape).astype("float32"))
    return model


def _ops(path):
    return collections.Counter((node.domain, node.op_type) for node in onnx.load(path).graph.node)


@pytest.mark.parametrize("trained_like,opset", [(True, 17), (False, 17), (True, 18)],
                         ids=["random_betas", "zero_betas", "opset_18"])
def test_fused_file_holds_the_fused_ops_and_computes_what_keras_does(tmp_path, trained_like, opset):
    """tf2onnx writes LayerNorm's means as GlobalAveragePool at opset 17 and as ReduceMean at 18: both fuse."""
    model = _model(trained_like)
    plain = export_onnx(model, str(tmp_path / "model.onnx"), verify=False, opset=opset)
    path = export_onnx(model, str(tmp_path / "model_float32_fused.onnx"), quantization="float32_fused", opset=opset)
    ops = _ops(path)
    # per block: the residual Add + LayerNorm before attention and before the MLP, and the MLP's GELU; then the
    # encoder's final LayerNorm, which no residual Add feeds
    assert ops[("com.microsoft", "SkipLayerNormalization")] == 2 * LAYERS
    assert ops[("com.microsoft", "Gelu")] == LAYERS
    assert ops[("", "LayerNormalization")] == 1
    assert not {op for _, op in ops} & {"Erf", "Sqrt", "Reciprocal", "GlobalAveragePool", "ReduceMean"}  # none left
    assert fused_nodes(path) == {**dict.fromkeys(FUSED_OPS, 0), "SkipLayerNormalization": 2 * LAYERS, "Gelu": LAYERS,
                                 "LayerNormalization": 1}
    assert not any(domain for domain, _ in _ops(plain))  # model.onnx stays default-domain only
    images = np.random.default_rng(1).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    expected = np.asarray(model.predict(images, verbose=0))
    for file in (plain, path):
        session = onnxruntime.InferenceSession(file, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(session.run(["predictions"], {"images": images})[0], expected, atol=2e-6)


def test_rewrite_keeps_the_numbers_and_counts_what_it_rewrote(tmp_path):
    model = _model(trained_like=True)
    plain = export_onnx(model, str(tmp_path / "model.onnx"), verify=False)
    proto = onnx.load(plain)
    counts = rewrite_for_fusion(proto)
    # LayerNorms: two per block and the encoder's last; GELUs: one per block
    assert counts == {"LayerNormalization (rewritten)": 2 * LAYERS + 1, "GELU (reordered)": LAYERS}
    images = np.random.default_rng(2).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    before = onnxruntime.InferenceSession(plain, providers=["CPUExecutionProvider"]).run(None, {"images": images})[0]
    after = onnxruntime.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(after.run(None, {"images": images})[0], before, atol=1e-6)


def test_contrib_ops_pass_only_in_the_fused_mode(tmp_path):
    path = export_onnx(_model(trained_like=True), str(tmp_path / "m.onnx"), quantization="float32_fused", verify=False)
    with open(path, "rb") as f:
        content = f.read()
    with pytest.raises(RuntimeError, match=r"non-standard ONNX ops \['com.microsoft.Gelu', "
                                           r"'com.microsoft.SkipLayerNormalization'\] \(only the default ONNX domain"):
        check_onnx(content, "m.onnx")
    check_onnx(content, "m.onnx", domains=export.onnx.ONNXRUNTIME_DOMAINS)


def test_a_wrong_fusion_fails_verification_and_leaves_nothing(tmp_path, monkeypatch):
    real = export.onnx.fuse

    def off_by_a_bit(content):  # a broken rewrite: every LayerNormalization's epsilon 1e-1 instead of 1e-6
        proto = onnx.load_from_string(real(content))
        for node in proto.graph.node:
            for attribute in node.attribute:
                if attribute.name == "epsilon":
                    attribute.f = 0.1
        return proto.SerializeToString()

    monkeypatch.setattr(export.onnx, "fuse", off_by_a_bit)
    model = _model(trained_like=True)
    with pytest.raises(VerificationError, match=r"relative_max_abs_diff = .* \(needs <= 2e-05\)"):
        export_onnx(model, str(tmp_path / "model_float32_fused.onnx"), quantization="float32_fused")
    assert os.listdir(tmp_path) == []


def test_an_opset_below_17_is_refused_by_name(tmp_path, capsys):
    model = _model(trained_like=True)
    with pytest.raises(ValueError, match=r"`opset` must be >= 17 for the 'float32_fused' ONNX file .* Received: opset=16"):
        export_onnx(model, str(tmp_path / "m.onnx"), quantization="float32_fused", opset=16)
    model.save(tmp_path / "m.keras")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(tmp_path / "m.keras"), "--formats", "onnx", "--onnx-quantization", "float32_fused", "--opset", "16",
                  "--output-dir", str(out)])
    assert exit_info.value.code == 2
    assert "--opset must be >= 17 for the 'float32_fused' ONNX file" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["m.keras"]


def test_the_report_counts_the_fused_nodes(tmp_path, trained_vit):
    out = tmp_path / "out"
    assert cli.main([trained_vit[1], "--formats", "onnx", "--onnx-quantization", "float32,float32_fused",
                     "--calibration-data", "digits", "--no-latency", "--output-dir", str(out)]) == 0
    rows = {row["name"]: row for row in json.loads((out / "report.json").read_text())["artifacts"]}
    fused = rows["model_float32_fused.onnx"]
    assert fused["passed"] and fused["quantization"] == "float32_fused"
    assert fused["relative_max_abs_diff"] <= 2e-5 and fused["runs_fast_on"].startswith("onnxruntime only")
    # trained_vit has one block: two SkipLayerNormalization, one Gelu, the encoder's last LayerNormalization
    assert fused["fused_nodes"] == fused_nodes(str(out / "model_float32_fused.onnx"))
    assert {k: v for k, v in fused["fused_nodes"].items() if v} == {"SkipLayerNormalization": 2, "Gelu": 1,
                                                                    "LayerNormalization": 1}
    assert "fused_nodes" not in rows["model.onnx"]


def test_a_graph_without_the_layernorm_pattern_is_refused_not_written_half_fused(tmp_path, monkeypatch):
    """A file with GELUs fused and every LayerNorm left as it was would pass the float32 bar and say "fused": refused."""
    monkeypatch.setattr(export.onnx_fusion, "MEANS", ("NoSuchOp",))  # as if tf2onnx wrote LayerNorm another way
    with pytest.raises(RuntimeError, match=r"no LayerNorm of the float32 graph matched the pattern"):
        export_onnx(_model(trained_like=True), str(tmp_path / "m.onnx"), quantization="float32_fused")
    assert os.listdir(tmp_path) == []


def test_without_sympy_the_mode_is_refused_before_any_work(tmp_path, monkeypatch, capsys):
    model = _model(trained_like=True)
    model.save(tmp_path / "m.keras")
    monkeypatch.setitem(sys.modules, "sympy", None)  # `import sympy` raises ImportError
    with pytest.raises(ValueError, match=r"onnxruntime's transformer optimizer, which cannot run here .*install `sympy`"):
        export_onnx(model, str(tmp_path / "m.onnx"), quantization="float32_fused")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([str(tmp_path / "m.keras"), "--formats", "onnx", "--onnx-quantization", "float32,float32_fused",
                  "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "install `sympy`" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["m.keras"]
