"""ONNX int8 files made by onnxruntime's quantisation tools (issue 11, item 5)."""

import collections
import json
import os

import keras
import numpy as np
import onnx
import onnxruntime
import pytest

import export.onnx
import keras_vit
from export import __main__ as cli
from export import export_all, export_onnx
from export.onnx_quantization import ONNX_QUANTIZATIONS, quantize, weight_elements
from export.tolerances import TOLERANCES, compare
from export.verify import VerificationError, reference_outputs

pytestmark = pytest.mark.export

FILES = {"float32": "model.onnx", "dynamic_int8": "model_dynamic_int8.onnx", "int8": "model_int8.onnx",
         "float32_fused": "model_float32_fused.onnx"}
INT8 = onnx.TensorProto.INT8
FLOAT = onnx.TensorProto.FLOAT


@pytest.fixture(scope="module")
def exported(trained_vit, tmp_path_factory):
    """keras-vit-export --formats onnx --onnx-quantization float32,dynamic_int8,int8,float32_fused on digits:
    (folder, report, number of tf2onnx conversions)."""
    import tf2onnx

    out = tmp_path_factory.mktemp("onnx_int8") / "out"
    args = [trained_vit[1], "--formats", "onnx", "--onnx-quantization", ",".join(ONNX_QUANTIZATIONS),
            "--calibration-data", "digits", "--no-latency", "--no-mediapipe", "--output-dir", str(out)]
    calls = []
    convert = tf2onnx.convert.from_function
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf2onnx.convert, "from_function", lambda *a, **k: calls.append(1) or convert(*a, **k))
        assert cli.main(args) == 0
    with open(out / "report.json") as f:
        return out, json.load(f), len(calls)


def _weight_matmuls(proto):
    """Data types of the constant weights fed to MatMul/MatMulInteger/Gemm, through a DequantizeLinear if any."""
    graph = proto.graph
    initializers = {t.name: t.data_type for t in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}

    def source(name):
        if name in initializers:
            return initializers[name]
        node = producers.get(name)
        return source(node.input[0]) if node is not None and node.op_type == "DequantizeLinear" else None

    kinds = [source(n.input[1]) for n in graph.node if n.op_type in ("MatMul", "MatMulInteger", "Gemm")]
    return collections.Counter(k for k in kinds if k is not None)


def test_every_mode_lands_verified_under_its_own_name(exported):
    out, report, conversions = exported
    assert conversions == 1  # the four files quantise (or fuse) one tf2onnx conversion of the one serving graph
    rows = {r["name"]: r for r in report["artifacts"]}
    assert set(rows) == set(FILES.values())
    for quantization, name in FILES.items():
        row = rows[name]
        assert (row["format"], row["quantization"], row["passed"]) == ("onnx", quantization, True)
        assert row["path"] == str(out / name) and os.path.isfile(row["path"])
        assert row["tolerance"] == TOLERANCES[quantization]
    # the calibrated file's calibration manifest beside it (export.calibration)
    assert sorted(os.listdir(out)) == sorted([*FILES.values(), "labels.txt", "report.json",
                                              FILES["int8"] + ".calibration.json"])


@pytest.mark.parametrize("quantization", ["dynamic_int8", "int8"])
def test_int8_weights_default_domain_ops_and_agreement_with_keras(exported, trained_vit, quantization):
    model, _, images, labels = trained_vit
    float_proto = onnx.load(str(exported[0] / FILES["float32"]))
    proto = onnx.load(str(exported[0] / FILES[quantization]))
    weights = _weight_matmuls(float_proto)
    # every weight matrix of the float32 file is an int8 initializer in the quantised file, none is left float32
    assert weights[FLOAT] >= 5 and set(weights) == {FLOAT}
    assert _weight_matmuls(proto) == {INT8: weights[FLOAT]}
    counts = weight_elements(proto.SerializeToString())
    assert counts["INT8"] > 0.6 * sum(counts.values())
    # 7-bit weights (REDUCE_RANGE): onnxruntime's uint8 x int8 kernels saturate on x86 CPUs without VNNI otherwise
    int8_weights = [onnx.numpy_helper.to_array(t) for t in proto.graph.initializer if t.data_type == INT8 and t.dims]
    assert int8_weights and max(int(np.abs(w.astype("int32")).max()) for w in int8_weights) == 64
    ops = collections.Counter(n.op_type for n in proto.graph.node)
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)  # runs in any ONNX runtime, not only onnxruntime
    if quantization == "int8":  # QDQ: both inputs of every matrix product (attention's too) come dequantised from int8
        producers = {out: node.op_type for node in proto.graph.node for out in node.output}
        matmuls = [n for n in proto.graph.node if n.op_type in ("MatMul", "Gemm")]  # pre-processing makes Gemms
        assert len(matmuls) > weights[FLOAT]
        assert all(producers.get(i) == "DequantizeLinear" for n in matmuls for i in n.input[:2])
        assert ops["QuantizeLinear"] > 0 and "MatMulInteger" not in ops
        # and LayerNorm's and GELU's arithmetic stays float32: min/max int8 there (onnxruntime's default, every op type)
        # broke ViT-Ti/16 (52% agreement, benchmarks/onnx_int8.py)
        dequantized = {out for n in proto.graph.node if n.op_type == "DequantizeLinear" for out in n.output}
        readers = {n.op_type for n in proto.graph.node if dequantized & set(n.input)}
        assert not readers & {"Sub", "Mul", "Sqrt", "Reciprocal", "GlobalAveragePool", "Erf"}, readers
    else:
        assert ops["DynamicQuantizeLinear"] > 0 and ops["MatMulInteger"] == weights[FLOAT] and "QuantizeLinear" not in ops
    session = onnxruntime.InferenceSession(str(exported[0] / FILES[quantization]), providers=["CPUExecutionProvider"])
    outputs = np.concatenate([session.run(["predictions"], {"images": images[i : i + 1]})[0] for i in range(len(images))])
    figures = compare(reference_outputs(model, images), outputs, labels)
    assert figures["decisive_top1_agreement"] >= TOLERANCES[quantization]["decisive_top1_agreement"]
    assert 1e-4 < figures["max_abs_diff"] < 0.5  # quantised (not the float32 file), yet the same probabilities roughly


def test_int8_files_are_smaller_where_weights_dominate(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=128, num_layers=1, num_heads=2, mlp_dim=512,
                                        input_shape=(16, 16, 3), classes=10, classifier_activation=None)
    calibration = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    sizes = {}
    for quantization in ONNX_QUANTIZATIONS:
        path = str(tmp_path / FILES[quantization])
        export_onnx(model, path, quantization=quantization, representative_data=calibration, verify=False)
        sizes[quantization] = os.path.getsize(path)
    assert sizes["dynamic_int8"] < 0.4 * sizes["float32"] and sizes["int8"] < 0.5 * sizes["float32"], sizes


def test_a_file_that_fails_verification_leaves_nothing(trained_vit, tmp_path, monkeypatch):
    real = export.onnx.quantize

    def zero_weights(content, *args, **kwargs):  # a broken quantiser: every int8 weight 0
        proto = onnx.load_from_string(real(content, *args, **kwargs))
        for tensor in proto.graph.initializer:
            if tensor.data_type == INT8 and len(tensor.dims) >= 2:
                tensor.raw_data = bytes(len(tensor.raw_data))
        return proto.SerializeToString()

    monkeypatch.setattr(export.onnx, "quantize", zero_weights)
    model, _, images, _ = trained_vit
    path = tmp_path / "model_int8.onnx"
    with pytest.raises(VerificationError, match=r"model_int8.onnx: (outputs are the same for every image .*; )?decisive_top1_agreement = .* \(needs >= 0.97\)"):
        export_onnx(model, str(path), quantization="int8", representative_data=images[:32], verification_data=images)
    assert os.listdir(tmp_path) == []


def test_quantising_tf2onnx_graph_leaves_the_working_folder_clean(exported, tmp_path, monkeypatch):
    """onnxruntime's symbolic shape inference fails on tf2onnx's dynamic-batch reshapes and leaves
    sym_shape_infer_temp.onnx (and a .data file) in the working folder: it is skipped."""
    monkeypatch.chdir(tmp_path)
    with open(exported[0] / FILES["float32"], "rb") as f:
        content = f.read()
    assert weight_elements(quantize(content, "dynamic_int8"))["INT8"] > 0
    assert os.listdir(tmp_path) == []


def test_bad_quantization_or_missing_calibration_names_the_argument(trained_vit, tmp_path, capsys):
    model = trained_vit[0]
    with pytest.raises(ValueError, match=r"`quantization` must be one of float32, dynamic_int8, int8, float32_fused for ONNX\. "
                                         r"Received: quantization='int4'"):
        export_onnx(model, str(tmp_path / "m.onnx"), quantization="int4")
    with pytest.raises(ValueError, match=r"quantization='int8' needs representative_data"):
        export_onnx(model, str(tmp_path / "m.onnx"), quantization="int8")
    with pytest.raises(ValueError, match=r"unknown onnx_quantization 'float16'; choose from float32, dynamic_int8, int8, float32_fused"):
        export_all(model, str(tmp_path / "out"), formats="onnx", onnx_quantization="float32,float16")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--formats", "onnx", "--onnx-quantization", "int4", "--output-dir", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and "--onnx-quantization: unknown mode 'int4'" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


def test_dynamic_int8_is_verified_one_image_at_a_time(exported, trained_vit):
    """The dynamic file quantises activations with one scale per call: an image's scores depend on its batch."""
    from export.verify import Artifact
    from export.runtimes import run_artifact

    images = trained_vit[2][:16]
    path = str(exported[0] / FILES["dynamic_int8"])
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    alone = np.concatenate([session.run(["predictions"], {"images": images[i : i + 1]})[0] for i in range(len(images))])
    together = session.run(["predictions"], {"images": images})[0]
    assert np.abs(together - alone).max() > 1e-3  # the trap
    np.testing.assert_array_equal(run_artifact(Artifact("m", "onnx", path, "dynamic_int8"), images), alone)
