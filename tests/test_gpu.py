"""Checks that need a GPU (marker `gpu`): XLA training in each precision, and export of a GPU-trained model.

tests/conftest.py skips them where TensorFlow sees no GPU ("needs a GPU"); run them with
`pytest -m gpu tests/test_gpu.py` on a GPU machine. NOT RUN ON A GPU YET: they were written (issue 17) on a
machine without one, using only the calls the CPU tests already exercise (`training.compile_model`, `fit`,
`export.export_all`). Checked there: `-m gpu` collects all five and they are skipped with "needs a GPU"; a copy
without the two device assertions passed on the CPU (XLA:CPU; loss 1.39 -> 0.53 in 12 steps in each precision).

- XLA: `compile_model(jit_compile=True)` raises if Keras dropped XLA, and pytest turns Keras' fall-back
  warning into an error (setup.cfg), so a pass means the train step was compiled with XLA on the GPU.
- Precision: float32, mixed_float16 (with the loss-scaling wrapper compile_model adds) and mixed_bfloat16:
  the loss is finite and falls over a few steps on one fixed batch.
- Export: a model trained on the GPU under a mixed policy exports as its float32 twin to a SavedModel and an
  ONNX file, each verified in its own runtime (`export_all` raises if one fails).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import VisionTransformer, training

pytestmark = pytest.mark.gpu

PRECISIONS = ["float32", "mixed_float16", "mixed_bfloat16"]


def _tiny_vit():
    return VisionTransformer(patch_size=4, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=128,
                             input_shape=(16, 16, 3), classes=4, classifier_activation=None)


def _fixed_batch(n=32):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (n, 16, 16, 3)).astype("float32"), np.arange(n) % 4


def _train_with_xla(steps):
    """A tiny ViT trained with XLA for `steps` steps on one fixed batch; returns (model, per-step losses)."""
    keras.utils.set_random_seed(0)
    model = _tiny_vit()
    training.compile_model(model, total_steps=steps, learning_rate=3e-3, jit_compile=True)
    assert model.jit_compile is True
    x, y = _fixed_batch()
    history = model.fit(x, y, batch_size=len(x), epochs=steps, shuffle=False, verbose=0)
    return model, history.history["loss"]


@pytest.mark.parametrize("precision", PRECISIONS)
def test_xla_training_on_the_gpu_in_each_precision(precision, policy):
    assert tf.config.list_logical_devices("GPU")
    policy(precision)
    model, losses = _train_with_xla(steps=12)
    assert "GPU" in model.trainable_variables[0].value.device
    expected = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[precision]
    assert model.get_layer("patch_encoder").compute_dtype == expected
    assert all(w.dtype == "float32" for w in model.weights)
    if precision == "mixed_float16":
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert np.all(np.isfinite(losses)), losses
    assert losses[-1] < 0.9 * losses[0], losses  # it learns the fixed batch
    assert model.predict(_fixed_batch(4)[0], verbose=0).dtype == np.float32


@pytest.mark.export
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_gpu_trained_model_exports_to_saved_model_and_onnx(precision, policy, tmp_path):
    from export import export_all

    policy(precision)
    model, losses = _train_with_xla(steps=3)
    assert np.all(np.isfinite(losses))
    report = export_all(model, str(tmp_path / "out"), formats="saved_model,onnx", quantizations="float32",
                        measure_latency=False)
    assert report["dtype_policy"] == precision and report["exported_computation"] == "float32"
    rows = {r["name"]: r for r in report["artifacts"]}
    assert set(rows) == {"saved_model", "model.onnx"}
    assert all(r["passed"] for r in rows.values()), rows
    assert (tmp_path / "out" / "saved_model").is_dir() and (tmp_path / "out" / "model.onnx").is_file()
