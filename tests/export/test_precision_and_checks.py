"""Issue 12: export under every dtype policy from one float32 trace, and a numeric check in every export function."""

import importlib
import json
import os
import shutil
import types

import keras
import numpy as np
import onnx
import onnxruntime
import pytest
import tensorflow as tf

import keras_vit
from export import __main__ as cli
from export import export_all, export_onnx, export_saved_model, export_tflite
from export.onnx import check_onnx
from export.signature import ServingGraph, dtype_policy_name, float32_twin
from export.tolerances import TOLERANCES
from export.verify import Artifact, VerificationError, verify

tflite_module = importlib.import_module("export.tflite")
onnx_module = importlib.import_module("export.onnx")
saved_model_module = importlib.import_module("export.saved_model")

pytestmark = pytest.mark.export

POLICIES = ["mixed_bfloat16", "mixed_float16", "bfloat16", "float16"]
PURE = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=10,
            classifier_activation=None)
HYBRID = dict(patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, resnet_num_layers=(1, 1),
              input_shape=(32, 32, 3), classes=10, classifier_activation=None)


def _random_model(config, policy="float32", seed=0):
    """A model built under `policy` with distinct seeded weights and a non-zero head (logits far from 0)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = keras_vit.VisionTransformer(**config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    rng = np.random.default_rng(seed)
    for v in model.weights:
        scale = 0.5 if "predictions" in v.path else 0.1
        v.assign(rng.normal(0, scale, v.shape).astype(v.dtype))
    return model


def _noise(shape, n=8, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *shape)).astype("float32")


@pytest.mark.parametrize("policy", POLICIES)
def test_float32_twin_of_every_policy(policy):
    model = _random_model(PURE, policy)
    twin = float32_twin(model)
    assert dtype_policy_name(model) == policy and dtype_policy_name(twin) == "float32"
    assert {layer.dtype_policy.name for layer in twin._flatten_layers()} == {"float32"}
    assert all(w.dtype == "float32" for w in twin.weights)
    for a, b in zip(model.weights, twin.weights):  # the same values, widened exactly
        np.testing.assert_array_equal(np.asarray(a).astype("float32"), np.asarray(b))
    x = _noise((16, 16, 3))
    # the twin computes in float32: the low-precision model differs from it by its own rounding only
    low, high = np.asarray(model(x), "float32"), np.asarray(twin(x))
    assert 0 < np.abs(low - high).max() < 0.05 * np.abs(high).max()
    assert float32_twin(twin) is twin


@pytest.mark.parametrize("config,policy", [(PURE, p) for p in POLICIES] + [(HYBRID, "mixed_bfloat16"), (HYBRID, "float16")],
                         ids=[f"vit-{p}" for p in POLICIES] + ["hybrid-mixed_bfloat16", "hybrid-float16"])
def test_every_format_exports_a_low_precision_model_as_float32(config, policy, tmp_path):
    model = _random_model(config, policy)
    report = export_all(model, str(tmp_path / "out"), quantizations="float32,dynamic_int8", measure_latency=False)
    assert report["dtype_policy"] == policy and report["exported_computation"] == "float32"
    rows = {r["name"]: r for r in report["artifacts"]}
    assert all(r["passed"] for r in rows.values()), rows
    for name in ("saved_model", "model_float32.tflite", "model.onnx"):
        assert rows[name]["relative_max_abs_diff"] <= 2e-5
    # the artifacts compute the float32 twin, independently of export's own comparison
    x = _noise(model.input_shape[1:])
    logits = np.asarray(float32_twin(model)(x), "float64")
    twin = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)  # artifacts output probabilities (issue 16)
    session = onnxruntime.InferenceSession(str(tmp_path / "out" / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"images": x})[0], twin, rtol=0, atol=2e-5 * np.abs(twin).max())


@pytest.mark.parametrize("batch_size,graphs", [(None, 1), (1, 2)])
def test_export_all_traces_and_writes_one_serving_graph_per_batch_setting(tmp_path, monkeypatch, batch_size, graphs):
    """STYLE: one trace, many artifacts; before issue 12 every TFLite mode wrote its own SavedModel.

    SavedModel and ONNX keep a dynamic batch; TFLite files default to a fixed batch of 1 (issue 11),
    which is a second serving graph, shared by every TFLite mode.
    """
    writes = []
    archive_class = type(keras.export.ExportArchive())  # the backend's class (TFExportArchive)
    original = archive_class.write_out
    monkeypatch.setattr(archive_class, "write_out", lambda self, *a, **k: writes.append(a) or original(self, *a, **k))
    model = _random_model(PURE)
    report = export_all(model, str(tmp_path / "out"), quantizations="float32,float16,dynamic_int8", measure_latency=False,
                        batch_size=batch_size, mediapipe=False)
    assert len(report["artifacts"]) == 5 and all(r["passed"] for r in report["artifacts"])
    assert len(writes) == graphs


def _other_weights(model):
    """The same architecture with the head's kernel changed by 1%: what a wrong conversion computes."""
    other = keras.models.clone_model(model)
    other.set_weights(model.get_weights())
    head = other.get_layer("predictions")
    head.kernel.assign(head.kernel * 1.01)
    return other


def _corrupt(fmt, model, monkeypatch):
    """Makes the next conversion of `fmt` write the file of other weights, as a broken converter would."""
    if fmt == "tflite":
        convert = tflite_module.convert
        monkeypatch.setattr(tflite_module, "convert", lambda graph, *a, **k: convert(ServingGraph(_other_weights(model)), *a, **k))
    elif fmt == "onnx":
        rename = onnx_module.rename_output

        def corrupt(proto, name):
            rename(proto, name)
            init = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
            init.CopyFrom(onnx.numpy_helper.from_array(onnx.numpy_helper.to_array(init) * 1.01, init.name))

        monkeypatch.setattr(onnx_module, "rename_output", corrupt)
    else:
        other = ServingGraph(_other_weights(model))
        copy_other = types.SimpleNamespace(copytree=lambda src, dst: shutil.copytree(other.saved_model_dir(), dst))
        monkeypatch.setattr(saved_model_module, "shutil", copy_other)


EXPORTERS = {
    "saved_model": lambda model, path, **k: export_saved_model(model, path, **k),
    "tflite": lambda model, path, **k: export_tflite(model, path, **k),
    "onnx": lambda model, path, **k: export_onnx(model, path, **k),
}


@pytest.mark.parametrize("fmt", list(EXPORTERS))
def test_every_export_function_checks_numbers_before_the_file_lands(fmt, tmp_path, monkeypatch):
    """Issue 12: a corrupted conversion (max |diff| 1.03) used to be returned as a success."""
    model = _random_model(PURE)
    path = str(tmp_path / {"saved_model": "sm", "tflite": "m.tflite", "onnx": "m.onnx"}[fmt])
    _corrupt(fmt, model, monkeypatch)
    with pytest.raises(VerificationError, match=r"relative_max_abs_diff = .* \(needs <= 2e-05\)"):
        EXPORTERS[fmt](model, path)
    assert not os.listdir(tmp_path)
    EXPORTERS[fmt](model, path, verify=False)  # the explicit opt-out writes it unchecked
    assert os.path.exists(path)


@pytest.mark.parametrize("fmt", list(EXPORTERS))
def test_an_artifact_that_outputs_nan_fails(fmt, tmp_path):
    """Issue 17: NaN > tolerance is False; an all-NaN artifact passed with cosine 1.0."""
    model = _random_model(PURE)
    broken = keras.models.clone_model(model)
    broken.set_weights(model.get_weights())
    bias = broken.get_layer("predictions").bias
    bias.assign(np.full(bias.shape, np.nan, "float32"))
    path = str(tmp_path / {"saved_model": "sm", "tflite": "m.tflite", "onnx": "m.onnx"}[fmt])
    EXPORTERS[fmt](broken, path, verify=False)  # a graph that really computes NaN in its runtime
    with pytest.raises(VerificationError, match=r"outputs are not finite: 80 NaN/Inf values"):
        verify(model, [Artifact(path, fmt, path)], _noise((16, 16, 3)), measure_latency=False)


def test_a_contrib_onnx_op_is_refused():
    """Issue 17: com.microsoft's FusedMatMul passes onnx.checker and loads in onnxruntime, but is not standard ONNX."""
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node("FusedMatMul", ["images", "w"], ["predictions"], domain="com.microsoft")], "g",
        [onnx.helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1, 2])],
        [onnx.helper.make_tensor_value_info("predictions", onnx.TensorProto.FLOAT, [1, 2])],
        [onnx.numpy_helper.from_array(np.eye(2, dtype="float32"), "w")],
    )
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17), onnx.helper.make_opsetid("com.microsoft", 1)])
    content = proto.SerializeToString()
    onnx.checker.check_model(proto, full_check=True)  # the gap: both accept it
    onnxruntime.InferenceSession(content, providers=["CPUExecutionProvider"])
    with pytest.raises(RuntimeError, match=r"c.onnx: non-standard ONNX ops \['com.microsoft.FusedMatMul'\]"):
        check_onnx(content, "c.onnx")


def _tfds_like(images, labels):
    return tf.data.Dataset.from_tensor_slices({"image": images, "label": labels}).batch(4)


def test_tfds_dict_datasets_calibrate_and_verify(tmp_path):
    model = _random_model(PURE)
    images, labels = _noise((16, 16, 3), 16), np.arange(16) % 10
    export_tflite(model, str(tmp_path / "m.tflite"), quantization="int8", representative_data=_tfds_like(images, labels),
                  verification_data=_tfds_like(images, labels), progress=False)
    report = export_all(model, str(tmp_path / "out"), formats="onnx", calibration_data=_tfds_like(images, labels),
                        measure_latency=False)
    assert report["num_verification_images"] == 16 and report["labelled"]
    bad = tf.data.Dataset.from_tensor_slices({"pixels": images})
    with pytest.raises(ValueError, match=r"under the key 'image' \(TFDS's layout.*Received: a dict with keys \['pixels'\]"):
        export_tflite(model, str(tmp_path / "b.tflite"), quantization="int8", representative_data=bad)


def test_cli_exports_a_sequential_wrapping_a_vit(tmp_path):
    """Issue 12: the CLI called `keras.Sequential([vit])` "not a keras_vit ViT" though the Python API exports it."""
    vit = _random_model(PURE)
    wrapped = keras.Sequential([keras.Input((16, 16, 3)), vit])
    wrapped.save(tmp_path / "seq.keras")
    out = tmp_path / "out"
    assert cli.main([str(tmp_path / "seq.keras"), "--formats", "onnx,tflite", "--quantization", "float32",
                     "--output-dir", str(out), "--no-latency"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert all(r["passed"] for r in report["artifacts"])


def test_the_noise_hint_only_where_it_applies(tmp_path, monkeypatch):
    model = _random_model(PURE)
    _corrupt("onnx", model, monkeypatch)  # a float32 failure: noise is not the cause
    with pytest.raises(VerificationError) as info:
        export_all(model, str(tmp_path / "a"), formats="onnx", measure_latency=False)
    assert "model.onnx: relative_max_abs_diff" in str(info.value) and "random noise" not in str(info.value)
    monkeypatch.setitem(TOLERANCES, "float16", {"decisive_top1_agreement": 1.01})
    with pytest.raises(VerificationError) as info:
        export_all(model, str(tmp_path / "b"), formats="tflite", quantizations="float16", measure_latency=False)
    assert "random noise" in str(info.value) and "--calibration-data" in str(info.value)


def test_a_conversion_failure_says_why_in_its_first_line(tmp_path):
    class Erfc(keras.layers.Layer):  # no TFLite builtin form (docs/traps.md)
        def call(self, x):
            return tf.math.erfc(x)

    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(Erfc()(inputs))))
    with pytest.raises(RuntimeError) as info:
        export_tflite(model, str(tmp_path / "m.tflite"))
    first = str(info.value).splitlines()[0]
    assert first.endswith("m.tflite: TFLite conversion with builtin ops only failed: "
                          "'tf.Erfc' op is neither a custom op nor a flex op")
    assert not os.listdir(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_train_then_export_under_a_mixed_policy_from_the_command_line(policy, tmp_path, capsys):
    """Issue 12's flow: keras-vit-train --precision P, then keras-vit-export of its model.keras, every artifact passed."""
    from keras_vit import train

    run = tmp_path / "mp"
    # 15 epochs without augmentation: ~90% held-out accuracy, decisive enough for the int8 agreement bar (97%)
    tiny = ["--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
            "--mlp-dim", "64", "--epochs", "15", "--warmup-epochs", "1", "--augment", "none", "--learning-rate", "3e-3",
            "--verbose", "0"]
    assert train.main([*tiny, "--precision", policy, "--output-dir", str(run)]) == 0
    assert cli.main([str(run / "model.keras"), "--calibration-data", "digits", "--output-dir", str(run / "export"),
                     "--no-latency"]) == 0
    assert f"trained under the dtype policy '{policy}'" in capsys.readouterr().out
    report = json.loads((run / "export" / "report.json").read_text())
    assert report["dtype_policy"] == policy and len(report["artifacts"]) == 6
    rows = {r["name"]: r for r in report["artifacts"]}
    assert all(r["passed"] for r in rows.values()), rows
    for name in ("saved_model", "model_float32.tflite", "model.onnx"):
        assert rows[name]["relative_max_abs_diff"] <= 2e-5


def test_a_low_precision_model_keras_cannot_rebuild_is_a_clear_error(tmp_path):
    class Unregistered(keras.layers.Layer):  # not registered: Keras cannot deserialise it by name
        def call(self, x):
            return x * 2.0

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((8, 8, 3))
        model = keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Flatten()(Unregistered()(inputs))))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    with pytest.raises(ValueError, match=r"computes in 'mixed_bfloat16' and its float32 twin cannot be rebuilt from its "
                                         r"config \(Could not locate class 'Unregistered'\)\. Register custom layers"):
        export_onnx(model, str(tmp_path / "m.onnx"))
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("fmt", list(EXPORTERS))
def test_verification_data_is_checked_up_front_and_named(fmt, tmp_path):
    """A fresh-user review: a wrong shape gave a raw TensorFlow error or blamed the calibration data."""
    model = _random_model(PURE)
    path = str(tmp_path / {"saved_model": "sm", "tflite": "m.tflite", "onnx": "m.onnx"}[fmt])
    for bad, received in ((np.zeros((4, 16, 16, 1), "float32"), r"images of shape \(4, 16, 16, 1\)"),
                          (np.zeros((0, 16, 16, 3), "float32"), "no images")):
        with pytest.raises(ValueError, match=r"`verification_data` must hold images of shape \(n, 16, 16, 3\) in "
                                             rf"\[-1, 1\]. Received: {received}"):
            EXPORTERS[fmt](model, path, verification_data=bad)
        assert not os.listdir(tmp_path)
    EXPORTERS[fmt](model, path, verification_data=_noise((16, 16, 3), 1)[0])  # one image without a batch axis
    assert os.path.exists(path)


@pytest.mark.parametrize("fmt", list(EXPORTERS))
def test_each_export_function_takes_scores(fmt, tmp_path):
    """A fresh-user review: only export_all took `scores`; the per-format functions always added a softmax."""
    model = _random_model(PURE)
    x = _noise((16, 16, 3), 4)
    logits = np.asarray(float32_twin(model)(x))
    path = str(tmp_path / {"saved_model": "sm", "tflite": "m.tflite", "onnx": "m.onnx"}[fmt])
    EXPORTERS[fmt](model, path, scores="logits")
    from export.runtimes import run_artifact

    out = np.concatenate([run_artifact(Artifact(fmt, fmt, path), x[i:i + 1]) for i in range(len(x))])
    np.testing.assert_allclose(out, logits, atol=2e-5 * np.abs(logits).max())
    assert not np.allclose(out.sum(-1), 1.0)  # raw logits, not probabilities
