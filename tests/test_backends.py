"""keras_vit on JAX and PyTorch against TensorFlow (issue 15): equal numbers, training, files, quantisation.

Driven from the TensorFlow run of `make test`: this process makes the
models and inputs on TensorFlow, then `tests/backend_worker.py` runs the
same model side under `KERAS_BACKEND=jax` and `KERAS_BACKEND=torch`, each in
its own process, and the numbers are compared here. (The model side's own
tests also run under both backends: `tests/run_suite.py` `BACKEND_TESTS`.) The command lines and whole
programs on the other backends: tests/test_backends_commands.py.
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from tests import backend_process, backend_worker
from tests.conftest import BACKEND

pytestmark = pytest.mark.tensorflow_only  # the TensorFlow side of the comparison
ROOT = backend_process.ROOT
OTHERS = backend_process.OTHERS
TOLERANCE = 1e-5  # the bar for logits, attention weights and rollout
LOSS_TOLERANCE = 1e-4  # the bar for the first 5 training losses


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """Inputs and TensorFlow-saved models, then every backend's numbers (TensorFlow's computed in this process)."""
    directory = tmp_path_factory.mktemp("backends")
    rng = np.random.default_rng(0)
    big = rng.uniform(-1, 1, (2, 224, 224, 3)).astype("float32")
    small = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    hybrid_images = rng.uniform(-1, 1, (2, 64, 64, 3)).astype("float32")
    labels = np.arange(8) % 5
    np.savez(directory / "inputs.npz", big=big, small=small, hybrid=hybrid_images, labels=labels)

    keras.utils.set_random_seed(0)
    vit = keras_vit.ViTTi16(weights=None, classes=10, classifier_activation=None)
    _random_head(vit, rng)
    vit.save(directory / "vit_ti16.keras")
    hybrid = keras_vit.VisionTransformer(
        input_shape=(64, 64, 3), patch_size=1, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, classes=4,
        resnet_num_layers=(1, 1), resnet_width_factor=1, classifier_activation=None, name="tiny_hybrid")
    _random_head(hybrid, rng)
    hybrid.save(directory / "hybrid.keras")
    backend_worker.tiny_model().save_weights(directory / "tiny.weights.h5")

    # The JAX and PyTorch workers run side by side while TensorFlow's numbers are computed here: the fixture took
    # 135 s with the three one after another.
    workers = {backend: backend_process.start("tests.backend_worker", backend, str(directory)) for backend in OTHERS}
    backend_worker.main(str(directory))  # TensorFlow, here
    failures = {}
    for backend, worker in workers.items():
        result = backend_process.finish(worker)
        if result.returncode:
            failures[backend] = result.stdout[-3000:] + result.stderr[-6000:]
    return directory, failures


def _random_head(model, rng):
    """keras_vit heads start at zero (paper, Appendix B.1.1); a non-zero head makes the logits worth comparing.

    Standard deviation 0.1: ViT-Ti/16's logits then span about [-5, 5] (the 1e-5 bar is absolute; at 0.5 they
    reach 19 and float32 rounding alone moves them by 1.2e-5 between backends, 6e-7 relative)."""
    head = model.get_layer("predictions")
    head.kernel.assign(rng.normal(0, 0.1, head.kernel.shape).astype("float32"))
    head.bias.assign(rng.normal(0, 0.1, head.bias.shape).astype("float32"))


def _numbers(workdir, backend):
    directory, failures = workdir
    assert backend not in failures, f"the {backend} worker failed:\n{failures[backend]}"
    with np.load(directory / backend / "numbers.npz") as f:
        numbers = dict(f)
    with open(directory / backend / "info.json") as f:
        return numbers, json.load(f)


@pytest.mark.parametrize("backend", OTHERS)
def test_logits_attention_and_rollout_equal_tensorflow(workdir, backend):
    """ViT-Ti/16 (saved on TensorFlow, loaded there) and a tiny hybrid: the same numbers within 1e-5."""
    ours, _ = _numbers(workdir, backend)
    reference, _ = _numbers(workdir, "tensorflow")
    assert 1 < np.abs(reference["vit_logits"]).max() < 10  # a head that moves the logits
    keys = ["vit_logits", "hybrid_logits", "vit_rollout"] + [k for k in reference if k.startswith("vit_attention_")]
    assert len(keys) == 3 + 12  # one attention map per encoder block of ViT-Ti/16
    for key in keys:
        assert ours[key].shape == reference[key].shape, key
        np.testing.assert_allclose(ours[key], reference[key], atol=TOLERANCE, rtol=0, err_msg=f"{backend}: {key}")


@pytest.mark.parametrize("backend", OTHERS)
def test_first_five_losses_and_weights_equal_tensorflow(workdir, backend):
    """compile_model's recipe (AdamW, exclusions, schedule, clipping) trains the same on every backend."""
    ours, info = _numbers(workdir, backend)
    reference, tf_info = _numbers(workdir, "tensorflow")
    assert len(ours["losses"]) == backend_worker.STEPS
    assert ours["losses"][-1] < ours["losses"][0]  # it learns
    np.testing.assert_allclose(ours["losses"], reference["losses"], atol=LOSS_TOLERANCE, rtol=0)
    trained = [k for k in reference if k.startswith("trained/")]
    assert any("class_token" in k for k in trained) and any("position_embedding" in k for k in trained)
    for key in trained:
        np.testing.assert_allclose(ours[key], reference[key], atol=1e-4, rtol=0, err_msg=f"{backend}: {key}")
    # XLA on JAX (no silent fall-back: compile_model checks it), no torch.compile on PyTorch (jit_compile="auto")
    assert info["jit_compile"] is (backend == "jax") and tf_info["jit_compile"] is True
    assert np.isfinite(info["tf_data_loss"])  # a keras_vit.data tf.data pipeline fits on this backend too


@pytest.mark.parametrize("backend", OTHERS)
def test_keras_file_saved_on_backend_loads_on_tensorflow(workdir, backend):
    """The tiny model trained and saved on JAX or PyTorch gives the same outputs here (the other way: the first test)."""
    directory, _ = workdir
    ours, _ = _numbers(workdir, backend)
    loaded = keras.saving.load_model(directory / backend / "trained.keras")
    inputs = np.load(directory / "inputs.npz")["small"]
    np.testing.assert_allclose(loaded.predict(inputs, verbose=0), ours["trained_logits"], atol=TOLERANCE, rtol=0)


# Keras' own quantisation (`model.quantize`) of the tiny trained model: largest |quantised - float| of its
# probabilities (softmax head), measured on every backend (2026-12-01: int8 9.4e-4 on TensorFlow and PyTorch,
# 1.4e-3 on JAX; int4 1.46e-2 on all three); the bars leave about 2x.
QUANTIZE_TOLERANCE = {"int8": 3e-3, "int4": 3e-2}


@pytest.mark.parametrize("backend", ("tensorflow",) + OTHERS)
@pytest.mark.parametrize("mode", backend_worker.QUANTIZATIONS)
def test_keras_quantize_saves_loads_and_stays_near_float(workdir, backend, mode):
    ours, _ = _numbers(workdir, backend)
    quantized, reloaded, float_ = (ours[f"quantized_{mode}_logits"], ours[f"quantized_{mode}_reloaded_logits"],
                                   ours["trained_logits"])
    np.testing.assert_array_equal(reloaded, quantized)  # the .keras round trip keeps the quantised weights
    error = np.abs(quantized - float_).max()
    print(f"{backend} {mode}: max |quantized - float| = {error:.2e}")
    assert 0 < error <= QUANTIZE_TOLERANCE[mode]  # really quantised, and close


def test_jax_data_parallel_on_two_cpu_devices_trains_as_one_device(workdir):
    """keras.distribution.DataParallel, JAX's counterpart of --strategy mirrored: two logical CPU devices, the
    batch split between them, the weights replicated; compile_model's recipe gives one device's losses and weights."""
    directory, _ = workdir
    code = f'''
import numpy as np, keras, jax
from tests import backend_worker
assert len(jax.devices()) == 2, jax.devices()
inputs = np.load({str(directory / "inputs.npz")!r})
def run(distribution):
    keras.distribution.set_distribution(distribution)
    model = backend_worker.tiny_model()
    model.load_weights({str(directory / "tiny.weights.h5")!r})
    backend_worker.compile_tiny(model)
    return backend_worker.train(model, inputs["small"], inputs["labels"]), model
one, single = run(None)
data_parallel = keras.distribution.DataParallel(devices=jax.devices())
two, model = run(data_parallel)
assert data_parallel.get_data_layout((8, 16, 16, 3)).axes[0] == "batch"  # the batch is split over the devices
kernel = model.get_layer("predictions").kernel.value
assert len(kernel.sharding.device_set) == 2 and kernel.sharding.is_fully_replicated
np.testing.assert_allclose(two, one, atol=1e-5, rtol=0)
for a, b in zip(model.trainable_variables, single.trainable_variables):
    np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-5, rtol=0)
print("OK", two.tolist())
'''
    env_flags = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=dict(env_flags, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.mark.slow
def test_keras_vit_export_takes_a_model_trained_on_jax(workdir, tmp_path):
    """keras-vit-export exports and verifies the tiny model trained and saved on JAX, started with KERAS_BACKEND=jax
    still set (it runs on TensorFlow and says so)."""
    directory, _ = workdir
    _numbers(workdir, "jax")
    out = tmp_path / "export"
    result = subprocess.run(
        [sys.executable, "-m", "export", str(directory / "jax" / "trained.keras"), "--formats", "saved_model,tflite,onnx",
         "--quantization", "float32,dynamic_int8", "--output-dir", str(out), "--no-latency", "--no-mediapipe"],
        cwd=ROOT, env=dict(os.environ, KERAS_BACKEND="jax"), capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "KERAS_BACKEND=jax set aside: export runs on Keras' TensorFlow backend" in result.stderr
    with open(out / "report.json") as f:
        report = json.load(f)
    artifacts = {a["name"]: a for a in report["artifacts"]}
    assert {"saved_model", "model_float32.tflite", "model_dynamic_int8.tflite", "model.onnx"} <= set(artifacts)
    assert all(a["passed"] for a in artifacts.values()), artifacts
    assert artifacts["model_float32.tflite"]["decisive_top1_agreement"] == 1.0
