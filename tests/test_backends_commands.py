"""keras_vit's command lines and whole programs on JAX and PyTorch (issue 15): the model side without TensorFlow,
JAX data parallelism over any data set size, the TensorFlow-only entry points' messages, a recipe's training.

Driven from the TensorFlow run of `make test`, each program in a process of its backend (tests/backend_process.py).
The numbers compared with TensorFlow's: tests/test_backends.py.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.backend_process import OTHERS, ROOT, run

pytestmark = pytest.mark.tensorflow_only  # driven from the TensorFlow run


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
        assert "pip install -e '.[tensorflow]' in the keras_vit checkout" in str(error), str(error)
    else:
        raise AssertionError(module + " imported without TensorFlow")
try:
    weights.resample_position_embedding(np.zeros((1, 17, 8)), (6, 6), 1, interpolation="bicubic")
except ImportError as error:
    assert "pip install -e '.[tensorflow]'" in str(error) and "bicubic" in str(error)
else:
    raise AssertionError("bicubic without TensorFlow")
try:
    import export
except ImportError as error:
    assert "pip install -e '.[export]' in the keras_vit checkout" in str(error), str(error)
else:
    raise AssertionError("export imported without TensorFlow")
from keras_vit.common import console as _console
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
    result = run(code, backend, timeout=600)
    assert result.returncode == 0 and f"OK {backend}" in result.stdout, result.stdout[-2000:] + result.stderr[-4000:]
    for prog in ("keras-vit-train", "keras-vit-pretrain"):
        assert (f"{prog}: error: {prog} (its input pipelines are tf.data) needs TensorFlow, which is not installed "
                f"here (Keras backend: {backend!r}). Install it with: pip install -e '.[tensorflow]' in the keras_vit "
                "checkout") in result.stderr


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


# One process a backend for all of test_tensorflow_only_entry_points_say_so_on_other_backends (one Keras start-up on
# JAX or PyTorch, not one per command): keras-vit-train's main() for each refusal (a JSON list of flag lists in
# argv[1]), its exit status on stdout and its messages on stderr after a marker of its own; then `import keras, export`
# last and uncaught, so that its ImportError ends the process with status 1. export's backend check is the first thing
# it does, on whether Keras is imported and on what backend: what ran before in this process does not enter it.
ENTRY_POINTS = r"""
import json, sys
from keras_vit.train import main
for argv in json.loads(sys.argv[1]):
    print("REFUSAL", file=sys.stderr, flush=True)
    try:
        main(argv)
    except SystemExit as exit:
        print("EXIT", exit.code, flush=True)
    else:
        print("EXIT 0", flush=True)
    sys.stderr.flush()
print("IMPORT EXPORT", file=sys.stderr, flush=True)
import keras, export
"""


@pytest.mark.parametrize("backend", OTHERS)
def test_tensorflow_only_entry_points_say_so_on_other_backends(backend, tmp_path):
    """`import export` after Keras started on JAX/PyTorch, and keras-vit-train --strategy mirrored there."""
    refusals = [["--output-dir", str(tmp_path / "run"), "--epochs", "1", "--strategy", "mirrored"]]
    if backend == "jax":  # XLA:CPU has no float16 matrix product: refused before any work, not an XLA error mid-fit
        refusals.append(["--output-dir", str(tmp_path / "f16"), "--epochs", "1", "--precision", "mixed_float16"])
    result = run(ENTRY_POINTS, backend, json.dumps(refusals), timeout=300)
    assert result.stdout.split("\n")[:len(refusals)] == ["EXIT 2"] * len(refusals), result.stdout[-2000:] + \
        result.stderr[-3000:]
    assert result.stderr.count("IMPORT EXPORT\n") == 1, result.stderr[-3000:]
    before_export, export_stderr = result.stderr.split("IMPORT EXPORT\n")
    stderrs = before_export.split("REFUSAL\n")[1:]
    assert len(stderrs) == len(refusals)
    assert result.returncode == 1
    assert f"ImportError: The export package runs on Keras' TensorFlow backend, and Keras already runs on {backend!r}" \
        in export_stderr, result.stderr[-3000:]
    assert not (tmp_path / "run").exists()
    assert (f"--strategy mirrored is a tf.distribute strategy, which runs on the TensorFlow backend only "
            f"(KERAS_BACKEND={backend} here)") in stderrs[0], result.stderr[-3000:]
    if backend == "jax":
        assert not (tmp_path / "f16").exists()
        assert "--precision mixed_float16: JAX's CPU backend has no float16 matrix product" in stderrs[1]


@pytest.mark.parametrize("backend", OTHERS)
def test_deit_recipe_trains_on_other_backends(backend, tmp_path):
    """Keras' augmentation layers in the tf.data pipeline (TensorFlow ops) feed a JAX or PyTorch train step."""
    out = tmp_path / "run"
    result = run("from keras_vit.train import main; main()", backend, "--output-dir", str(out), "--recipe", "deit",
                  "--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1",
                  "--num-heads", "2", "--mlp-dim", "32", "--epochs", "1", "--warmup-epochs", "0", "--verbose", "0",
                  timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["backend"] == backend and metrics["recipe"] == "deit" and 0 <= metrics["accuracy"] <= 1
    assert metrics["jit_compile"] is (backend == "jax")
