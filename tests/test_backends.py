"""keras_vit on JAX and PyTorch against TensorFlow (issue 15): equal numbers, training, files, quantisation.

Driven from the TensorFlow run of `make test`: this process makes the
models and inputs on TensorFlow, then `tests/backend_worker.py` runs the
same model side under `KERAS_BACKEND=jax` and `KERAS_BACKEND=torch`, each in
its own process, and the numbers are compared here. (The model side's own
tests also run under both backends: `tests/run_suite.py` `BACKEND_TESTS`.)
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from tests import backend_worker
from tests.conftest import BACKEND

pytestmark = pytest.mark.tensorflow_only  # the TensorFlow side of the comparison
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OTHERS = ("jax", "torch")
TOLERANCE = 1e-5  # the bar for logits, attention weights and rollout
LOSS_TOLERANCE = 1e-4  # the bar for the first 5 training losses


def _start(code_or_module, backend, *args):
    """A Python process on `backend` running a `tests.` module or a line of code; its output is piped."""
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
    command = [sys.executable, *(["-m", code_or_module] if code_or_module.startswith("tests.") else ["-c", code_or_module]), *args]
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(process, timeout=900):
    """Waits for a process of `_start` (killed after `timeout` s); returns a `CompletedProcess`."""
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _run(code_or_module, backend, *args, timeout=900):
    return _finish(_start(code_or_module, backend, *args), timeout)


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
    workers = {backend: _start("tests.backend_worker", backend, str(directory)) for backend in OTHERS}
    backend_worker.main(str(directory))  # TensorFlow, here
    failures = {}
    for backend, worker in workers.items():
        result = _finish(worker)
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


@pytest.mark.parametrize("backend", OTHERS)
def test_model_side_runs_without_tensorflow(backend):
    """TensorFlow made unimportable: the model side works, and tf.data parts name the extra to install."""
    code = r'''
import sys
for name in ("tensorflow", "tensorflow_datasets", "tf2onnx", "tf_keras"):
    sys.modules[name] = None  # as if not installed
import numpy as np, keras, keras_vit
from keras_vit import inspect, training, weights
model = keras_vit.VisionTransformer(input_shape=(16, 16, 3), patch_size=4, hidden_size=32, num_layers=1,
                                    num_heads=2, mlp_dim=64, classes=3)
x = np.random.default_rng(0).uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
training.compile_model(model, total_steps=2)
model.fit(x, np.arange(4) % 3, batch_size=2, verbose=0)
assert inspect.attention_rollout(model, x).shape == (4, 16, 16)
assert keras_vit.resize(model, (24, 24, 3)).get_layer("patch_encoder").position_embedding.shape == (1, 37, 32)
assert weights.resample_position_embedding(np.zeros((1, 17, 8)), (6, 6), 1).shape == (1, 37, 8)
hybrid = keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=1, hidden_size=32, num_layers=1,
                                     num_heads=2, mlp_dim=64, classes=3, resnet_num_layers=(1,))
assert hybrid.predict(x[:, :16, :16].repeat(2, 1).repeat(2, 2), verbose=0).shape == (4, 3)
for module in ("keras_vit.data", "keras_vit.pretraining"):
    try:
        __import__(module)
    except ImportError as error:
        assert "pip install 'keras_vit[tensorflow]'" in str(error), str(error)
    else:
        raise AssertionError(module + " imported without TensorFlow")
try:
    weights.resample_position_embedding(np.zeros((1, 17, 8)), (6, 6), 1, interpolation="bicubic")
except ImportError as error:
    assert "keras_vit[tensorflow]" in str(error) and "bicubic" in str(error)
else:
    raise AssertionError("bicubic without TensorFlow")
try:
    import export
except ImportError as error:
    assert "pip install 'keras_vit[export]'" in str(error), str(error)
else:
    raise AssertionError("export imported without TensorFlow")
from keras_vit.cli import console as _console
assert _console.describe_devices().startswith("CPU (")  # the command lines' device line, from the backend
from keras_vit import pretrain, train
for main in (train.main, pretrain.main):  # exit 2, one line naming the extra (tested on stderr below)
    try:
        main(["--output-dir", "unused"])
    except SystemExit as exit:
        assert exit.code == 2
    else:
        raise AssertionError("a training command line ran without TensorFlow")
assert not [m for m in sys.modules if m.startswith("tensorflow") and sys.modules[m] is not None]
print("OK", keras.backend.backend())
'''
    result = _run(code, backend, timeout=600)
    assert result.returncode == 0 and f"OK {backend}" in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]
    for prog in ("keras-vit-train", "keras-vit-pretrain"):
        assert (f"{prog}: error: {prog} (its input pipelines are tf.data) needs TensorFlow, which is not installed "
                f"here (Keras backend: {backend!r}). Install it with: pip install 'keras_vit[tensorflow]'") in result.stderr


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


PARTIAL_BATCHES = r"""
import numpy as np, keras, jax, keras_vit
from keras_vit import data, training
assert len(jax.devices()) == 2, jax.devices()
rng = np.random.default_rng(0)
pixels, labels = rng.integers(0, 256, (9, 16, 16, 3)).astype("uint8"), np.arange(9) % 3
pipeline = data.from_arrays(pixels, labels, image_size=16, batch_size=4)  # batches of 4, 4 and 1
images = np.concatenate([x for x, _ in pipeline.as_numpy_iterator()])
def model():
    keras.utils.set_random_seed(0)
    vit = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                      input_shape=(16, 16, 3), classes=3, classifier_activation=None)
    return training.compile_model(vit, total_steps=6, learning_rate=1e-2)
single = model()
single.fit(images, labels, batch_size=4, epochs=2, verbose=0, shuffle=False)
expected = (single.predict(pipeline, verbose=0), single.evaluate(pipeline, verbose=0, return_dict=True))
keras.distribution.set_distribution(keras.distribution.DataParallel(devices=jax.devices()))
vit = model()
vit.set_weights(single.get_weights())
outputs = vit.predict(pipeline, verbose=0)  # the last batch of 1 padded to 2 and trimmed
assert outputs.shape == (9, 3), outputs.shape
np.testing.assert_allclose(outputs, expected[0], atol=1e-5)
np.testing.assert_allclose(vit.predict(images, batch_size=4, verbose=0), expected[0], atol=1e-5)  # NumPy too
logs = vit.evaluate(pipeline, verbose=0, return_dict=True)  # every image counted once
assert set(logs) == set(expected[1]) and abs(logs["loss"] - expected[1]["loss"]) < 1e-5, (logs, expected[1])
assert logs["accuracy"] == expected[1]["accuracy"] and round(logs["accuracy"] * 9) == logs["accuracy"] * 9
history = vit.fit(pipeline, validation_data=pipeline, epochs=2, verbose=0).history  # the image past 8 dropped
assert len(history["loss"]) == 2 and np.isfinite(history["val_loss"]).all()
vit.fit(pixels[:7].astype("float32") / 127.5 - 1, labels[:7], batch_size=4, verbose=0)  # 7 arrays: 4 + 2 kept
assert vit.predict(pipeline, verbose=0).shape == (9, 3)  # usable after fit
arrays = pixels.astype("float32") / 127.5 - 1
assert set(vit.fit(arrays, labels, batch_size=4, validation_split=0.34, verbose=0).history) >= {"val_loss"}
for bad, said in (((arrays, labels), "batch_size=3"), ((data.from_arrays(pixels, labels, image_size=16, batch_size=1),),
                                                         "batches hold 1 image")):
    try:
        vit.fit(*bad, batch_size=3 if len(bad) == 2 else None, verbose=0)
    except ValueError as error:  # before the first step: the model stays usable
        assert f"over 2 devices, and the data set's {said}" in str(error) or f"over 2 devices, and {said}" in str(error)
    else:
        raise AssertionError("an uneven batch was taken")
vit.save("partial.keras")
from keras_vit import even_batches
loaded = keras.saving.load_model("partial.keras")
assert even_batches.install(loaded)  # a loaded model is Keras-compiled: install gives it the same
np.testing.assert_allclose(loaded.predict(pipeline, verbose=0), vit.predict(pipeline, verbose=0), atol=1e-5)
print("OK")
"""


def test_jax_data_parallel_fits_evaluates_and_predicts_any_data_set_size(tmp_path):
    """Issue 29, item 1: 9 images in batches of 4 on 2 devices failed at the last batch of 1 in fit, evaluate and
    predict with JAX's IndivisibleError. compile_model's model drops the remainder in training and pads and trims in
    evaluation and prediction: the outputs, loss and accuracy of one device."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=ROOT, KERAS_BACKEND="jax",
               TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", PARTIAL_BATCHES], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0 and "OK" in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]


@pytest.mark.parametrize("backend", OTHERS)
def test_tensorflow_only_entry_points_say_so_on_other_backends(backend, tmp_path):
    """`import export` after Keras started on JAX/PyTorch, and keras-vit-train --strategy mirrored there."""
    result = _run("import keras, export", backend, timeout=300)
    assert result.returncode == 1
    assert f"ImportError: The export package runs on Keras' TensorFlow backend, and Keras already runs on {backend!r}" \
        in result.stderr, result.stderr[-3000:]
    result = _run("from keras_vit.train import main; main()", backend, "--output-dir", str(tmp_path / "run"),
                  "--epochs", "1", "--strategy", "mirrored", timeout=300)
    assert result.returncode == 2 and not (tmp_path / "run").exists()
    assert (f"--strategy mirrored is a tf.distribute strategy, which runs on the TensorFlow backend only "
            f"(KERAS_BACKEND={backend} here)") in result.stderr, result.stderr[-3000:]
    if backend == "jax":  # XLA:CPU has no float16 matrix product: refused before any work, not an XLA error mid-fit
        result = _run("from keras_vit.train import main; main()", backend, "--output-dir", str(tmp_path / "f16"),
                      "--epochs", "1", "--precision", "mixed_float16", timeout=300)
        assert result.returncode == 2 and not (tmp_path / "f16").exists()
        assert "--precision mixed_float16: JAX's CPU backend has no float16 matrix product" in result.stderr


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


@pytest.mark.parametrize("backend", OTHERS)
def test_deit_recipe_trains_on_other_backends(backend, tmp_path):
    """Keras' augmentation layers in the tf.data pipeline (TensorFlow ops) feed a JAX or PyTorch train step."""
    out = tmp_path / "run"
    result = _run("from keras_vit.train import main; main()", backend, "--output-dir", str(out), "--recipe", "deit",
                  "--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1",
                  "--num-heads", "2", "--mlp-dim", "32", "--epochs", "1", "--warmup-epochs", "0", "--verbose", "0",
                  timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["backend"] == backend and metrics["recipe"] == "deit" and 0 <= metrics["accuracy"] <= 1
    assert metrics["jit_compile"] is (backend == "jax")
