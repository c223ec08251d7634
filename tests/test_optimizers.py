"""keras_vit.optimizers: the update under XLA (`jit_compile`) for train steps without it (issue 30, item 2)."""

import keras
import numpy as np
import pytest

from keras_vit import VisionTransformer, optimizers, training
from keras_vit.common.backend import backend

X = np.random.default_rng(0).uniform(0, 255, (16, 16, 16, 3)).astype("float32")
Y = np.arange(16) % 5  # conftest.TINY has 5 classes


def _fit(tiny_config, policy, update, optimizer="adamw", precision="float32"):
    """(losses, weights, optimizer) of a tiny ViT fitted 2 epochs without XLA in the step, the update as `update`."""
    keras.utils.set_random_seed(0)
    policy(precision)
    model = VisionTransformer(**tiny_config)
    policy("float32")
    training.compile_model(model, total_steps=4, optimizer=optimizer, weight_decay=0.05 if optimizer == "adamw" else 0,
                           jit_compile=False, jit_compile_update=update)
    history = model.fit(X, Y, batch_size=8, epochs=2, verbose=0)
    return history.history["loss"], model.get_weights(), getattr(model.optimizer, "inner_optimizer", model.optimizer)


@pytest.mark.tensorflow_only  # the update under XLA is TensorFlow's
@pytest.mark.parametrize("optimizer,precision", [("adamw", "float32"), ("sgd", "float32"), ("adamw", "mixed_bfloat16")])
def test_the_update_under_xla_gives_the_plain_update(tiny_config, policy, optimizer, precision):
    plain_losses, plain_weights, plain = _fit(tiny_config, policy, False, optimizer, precision)
    xla_losses, xla_weights, compiled = _fit(tiny_config, policy, True, optimizer, precision)
    assert len(plain._xla_updates) == 0 and len(compiled._xla_updates) == 1  # one compiled update, for the model's variables
    np.testing.assert_allclose(xla_losses, plain_losses, rtol=1e-5)
    assert len(xla_weights) == len(plain_weights)
    for a, b in zip(xla_weights, plain_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)  # float32 rounding: XLA may reorder a sum
    assert int(compiled.iterations) == int(plain.iterations) == 4


@pytest.mark.tensorflow_only
@pytest.mark.float16_matmul
def test_the_update_under_xla_inside_the_loss_scale_optimizer(tiny_config, policy):
    """mixed_float16: `compile_model` wraps the optimizer in Keras' LossScaleOptimizer, which calls its update in a
    branch of a condition (finite gradients); the compiled update runs there too."""
    plain_losses, plain_weights, _ = _fit(tiny_config, policy, False, "adamw", "mixed_float16")
    xla_losses, xla_weights, compiled = _fit(tiny_config, policy, True, "adamw", "mixed_float16")
    assert len(compiled._xla_updates) == 1
    np.testing.assert_allclose(xla_losses, plain_losses, rtol=1e-3)  # float16 compute amplifies float32 rounding
    for a, b in zip(xla_weights, plain_weights):
        np.testing.assert_allclose(a, b, atol=1e-3)


def test_auto_compiles_the_update_where_the_step_runs_without_xla(tiny_config):
    def update(**kwargs):
        model = training.compile_model(VisionTransformer(**tiny_config), total_steps=4, **kwargs)
        return model.optimizer.jit_compile

    assert update(jit_compile=False) is (backend() == "tensorflow")  # JAX and PyTorch: no such update
    assert update(jit_compile=False, jit_compile_update=False) is False
    assert update(jit_compile=True) is False  # the whole step is compiled anyway
    assert update(jit_compile=True, jit_compile_update=True) is True  # asked for: harmless inside an XLA step
    if backend() == "tensorflow":
        import tensorflow as tf

        with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
            assert update(jit_compile=False) is False  # a strategy's update merges replicas: not under XLA


@pytest.mark.tensorflow_only
def test_under_a_strategy_the_plain_update_runs_even_when_asked(tiny_config):
    import tensorflow as tf

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = training.compile_model(VisionTransformer(**tiny_config), total_steps=4, jit_compile=False,
                                       jit_compile_update=True)
    history = model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert model.optimizer.jit_compile is True and len(model.optimizer._xla_updates) == 0
    assert int(model.optimizer.iterations) == 2 and np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_jit_compile_update_is_auto_or_a_bool(tiny_config, value):
    with pytest.raises(ValueError, match=rf"`jit_compile_update` must be 'auto', True or False. "
                                         rf"Received: jit_compile_update={value!r}"):
        training.compile_model(VisionTransformer(**tiny_config), total_steps=4, jit_compile_update=value)


@pytest.mark.parametrize("cls", [optimizers.AdamW, optimizers.SGD])
def test_the_optimizers_jit_compile_is_a_saved_bool(cls):
    assert cls is getattr(training, cls.__name__)  # also keras_vit.training.AdamW / SGD
    assert cls(0.1).jit_compile is False
    again = cls.from_config(cls(0.1, jit_compile=True).get_config())
    assert again.jit_compile is True and again.get_config()["jit_compile"] is True
    with pytest.raises(ValueError, match=r"`jit_compile` must be True or False. Received: jit_compile='yes'"):
        cls(0.1, jit_compile="yes")


@pytest.mark.tensorflow_only
def test_a_saved_model_keeps_its_update_under_xla(tiny_config, tmp_path):
    keras.utils.set_random_seed(0)
    model = training.compile_model(VisionTransformer(**tiny_config), total_steps=8, jit_compile=False)
    model.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    model.save(tmp_path / "model.keras")
    again = keras.saving.load_model(tmp_path / "model.keras")
    assert again.optimizer.jit_compile is True and int(again.optimizer.iterations) == 2
    again.fit(X, Y, batch_size=8, epochs=1, verbose=0)
    assert int(again.optimizer.iterations) == 4 and len(again.optimizer._xla_updates) == 1
