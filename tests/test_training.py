import keras
import numpy as np
from keras import ops
import pytest

from keras_vit import VisionTransformer, losses, training
from tests.conftest import XLA_BY_DEFAULT


def test_schedule_warmup_then_cosine():
    schedule = training.learning_rate_schedule(1e-3, total_steps=110, warmup_steps=10)
    lr = lambda step: float(schedule(step))  # noqa: E731
    assert lr(0) == pytest.approx(0.0)
    assert lr(5) == pytest.approx(0.5e-3)
    assert lr(10) == pytest.approx(1e-3)
    assert lr(60) == pytest.approx(0.5e-3, rel=1e-4)  # half-way through the cosine
    assert lr(110) == pytest.approx(0.0, abs=1e-9)
    assert float(training.learning_rate_schedule(0.1, 10)(0)) == pytest.approx(0.1)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"learning_rate": 0}, r"`learning_rate` must be a positive float. Received: learning_rate=0"),
        ({"total_steps": 0}, r"`total_steps` must be a positive int. Received: total_steps=0"),
        ({"warmup_steps": 10}, r"`warmup_steps` must be an int in \[0, total_steps=10\). Received: warmup_steps=10"),
    ],
)
def test_schedule_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        training.learning_rate_schedule(**{"learning_rate": 1e-3, "total_steps": 10, **kwargs})


def test_label_smoothing_loss_matches_formula():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3]], "float32")
    labels = np.array([0, 2])
    s = 0.1
    targets = np.full((2, 3), s / 3) + (1 - s) * np.eye(3)[labels]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected = -(targets * log_probs).sum(-1).mean()
    loss = losses.SparseCategoricalCrossentropyWithSmoothing(s, from_logits=True)
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    plain = losses.SparseCategoricalCrossentropyWithSmoothing(0.0, from_logits=True)
    assert float(plain(labels, logits)) == pytest.approx(float(ops.convert_to_numpy(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)).mean()), rel=1e-5)


def test_compile_holds_xla_and_recipe(tiny_config):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(model, total_steps=100, warmup_steps=10, label_smoothing=0.1)
    assert model.jit_compile is XLA_BY_DEFAULT
    opt = model.optimizer
    assert isinstance(opt, keras.optimizers.AdamW) and opt.global_clipnorm == 1.0
    assert isinstance(model.loss, losses.Crossentropy) and model.loss.from_logits and model.loss.label_smoothing == 0.1
    sgd = VisionTransformer(**tiny_config)
    training.compile_model(sgd, total_steps=10, optimizer="sgd", weight_decay=0, jit_compile=False)
    assert isinstance(sgd.optimizer, keras.optimizers.SGD) and sgd.optimizer.momentum == 0.9
    assert sgd.loss.get_config()["from_logits"] is False  # softmax head


def test_weight_averaging_option(tiny_config):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(model, total_steps=10, ema_momentum=0.9)
    assert model.optimizer.use_ema and model.optimizer.ema_momentum == 0.9
    plain = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(plain, total_steps=10)
    assert not plain.optimizer.use_ema
    with pytest.raises(ValueError, match=r"Received: ema_momentum=1.5"):
        training.compile_model(plain, total_steps=10, ema_momentum=1.5)


def test_adamw_skips_decay_on_norms_biases_and_embeddings(tiny_config):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(model, total_steps=10)
    model.optimizer.build(model.trainable_variables)
    decayed = {v.name for v in model.trainable_variables if model.optimizer._use_weight_decay(v)}
    assert decayed == {"kernel"}


@keras.saving.register_keras_serializable(package="keras_vit_tests")
class NoXLA(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_jit = False

    def call(self, x):
        return x


@pytest.mark.filterwarnings("ignore:Model doesn't support")
def test_silent_xla_fallback_is_an_error():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(NoXLA()(inputs)))
    with pytest.raises(RuntimeError, match=r"XLA was requested \(jit_compile=True\) but Keras fell back"):
        training.compile_model(model, total_steps=10, from_logits=True, jit_compile=True)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"optimizer": "adam"}, r"`optimizer` must be one of 'sgd', 'adamw'. Received: optimizer='adam'"),
        ({"optimizer": "sgd"}, r"`weight_decay` is only used with optimizer='adamw'"),
        ({"label_smoothing": 1.0}, r"Received: label_smoothing=1.0"),
        ({"weight_decay": -1}, r"Received: weight_decay=-1"),
        ({"global_clipnorm": 0}, r"Received: global_clipnorm=0"),
    ],
)
def test_compile_bad_arguments(tiny_config, kwargs, message):
    model = VisionTransformer(**tiny_config)
    with pytest.raises(ValueError, match=message):
        training.compile_model(model, total_steps=10, **kwargs)


def test_from_logits_cannot_be_guessed_for_sigmoid(tiny_config):
    model = VisionTransformer(classifier_activation="sigmoid", **tiny_config)
    with pytest.raises(ValueError, match=r"pass from_logits=True or False"):
        training.compile_model(model, total_steps=10)


def test_xla_fit_learns_a_separable_task(tiny_config):
    """Two classes that differ in mean brightness: a few XLA steps must fit them."""
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    y = np.arange(64) % 2
    x = (rng.normal(scale=0.3, size=(64, 16, 16, 3)) + np.where(y, 0.5, -0.5)[:, None, None, None]).astype("float32")
    model = VisionTransformer(classifier_activation=None, **{**tiny_config, "classes": 2})
    training.compile_model(model, total_steps=40, learning_rate=3e-3, warmup_steps=4)
    history = model.fit(x, y, batch_size=16, epochs=10, verbose=0)
    assert history.history["loss"][-1] < 0.3 < history.history["loss"][0]
    assert history.history["accuracy"][-1] >= 0.95


# --- Saving and loading keeps the recipe (issue 12 A), mixed and pure 16-bit precision (issue 12 C, issue 17) ---

NOT_DECAYED = ("bias", "gamma", "beta", "class_token", "distillation_token", "position_embedding")  # the recipe, written out independently


def _tiny_vit(classes=3):
    return VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32,
                             input_shape=(8, 8, 3), classes=classes, classifier_activation=None)


def _tiny_data(n=8, classes=3):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (n, 8, 8, 3)).astype("float32"), np.arange(n) % classes


def _zero_gradient_step(model):
    """One step with zero gradients and zeroed Adam moments: only the weight decay moves a weight."""
    opt = model.optimizer
    moments = [v for v in opt.variables if v is not opt.iterations]
    assert len(moments) == 2 * len(model.trainable_variables)
    for v in moments:
        v.assign(np.zeros(v.shape, v.dtype))
    before = [v.numpy() for v in model.trainable_variables]
    opt.apply_gradients([(keras.ops.zeros(v.shape, "float32"), v) for v in model.trainable_variables])
    return [(v.name, b, v.numpy()) for v, b in zip(model.trainable_variables, before)]


def test_reloaded_adamw_keeps_exclusions_schedule_and_step_counter(tmp_path):
    model = _tiny_vit()
    training.compile_model(model, total_steps=10, learning_rate=0.1, warmup_steps=3, weight_decay=0.5)
    x, y = _tiny_data()
    model.fit(x, y, batch_size=4, epochs=1, verbose=0)  # 2 steps
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras")
    opt, again = model.optimizer, reloaded.optimizer
    assert type(again) is training.AdamW  # the class that clips after the all-reduce
    assert again.get_config() == opt.get_config() and again.global_clipnorm == 1.0
    assert int(again.iterations) == int(opt.iterations) == 2
    for a, b in zip(again.variables, opt.variables):  # Adam's moments
        np.testing.assert_array_equal(a.numpy(), b.numpy())

    # Step 2 of 3 warm-up steps to 0.1: lr 0.1 * 2 / 3, so a decayed weight is multiplied by 1 - 0.5 * lr.
    factor = 1 - 0.5 * 0.1 * 2 / 3
    for m in (model, reloaded):
        result = _zero_gradient_step(m)
        kept = [name for name, before, after in result if name in NOT_DECAYED]
        assert {name for name in kept} == set(NOT_DECAYED) - {"distillation_token"} and len(kept) == 16 and len(result) - len(kept) == 8
        for name, before, after in result:
            expected = before if name in NOT_DECAYED else before * factor
            np.testing.assert_allclose(after, expected, rtol=1e-6, err_msg=name)

    # The schedule gives the same values at the same steps: warm-up, then cosine decay to 0 at step 10.
    for step in range(11):
        opt.iterations.assign(step)
        again.iterations.assign(step)
        expected = 0.1 * step / 3 if step < 3 else 0.1 * 0.5 * (1 + np.cos(np.pi * (step - 3) / 7))
        assert float(again.learning_rate) == pytest.approx(float(opt.learning_rate), abs=1e-9)
        assert float(again.learning_rate) == pytest.approx(expected, rel=1e-5, abs=1e-9)


def test_variables_excluded_by_object_are_kept_by_path():
    layer = keras.layers.Dense(2, name="dense_to_decay")
    layer.build((None, 3))
    layer.bias.assign(np.ones(2, "float32"))
    opt = training.AdamW(learning_rate=0.1, weight_decay=0.5)
    opt.exclude_from_weight_decay(var_list=[layer.kernel])
    again = training.AdamW.from_config(opt.get_config())
    assert again.get_config()["exclude_from_weight_decay_paths"] == ["dense_to_decay/kernel"]
    kernel = layer.kernel.numpy()
    again.apply_gradients([(np.zeros(v.shape, "float32"), v) for v in (layer.kernel, layer.bias)])
    np.testing.assert_array_equal(layer.kernel.numpy(), kernel)
    np.testing.assert_allclose(layer.bias.numpy(), np.full(2, 1 - 0.5 * 0.1), rtol=1e-6)


@pytest.mark.parametrize("precision", ["float32", pytest.param("mixed_float16", marks=pytest.mark.float16_matmul)])
def test_clipping_at_global_norm_one_bounds_the_update_before_and_after_reloading(policy, precision, tmp_path):
    """SGD without momentum at learning rate lr: a clipped step moves the weights by exactly lr * g / ||g||."""
    policy(precision)
    lr, total = 0.05, 100
    model = _tiny_vit()
    training.compile_model(model, total_steps=total, optimizer="sgd", momentum=0.0, weight_decay=0,
                           learning_rate=lr, ema_momentum=0.9, jit_compile=False)
    # Far above norm 1, also after LossScaleOptimizer divides it by its loss scale (2 ** 15).
    rng = np.random.default_rng(0)
    grads = [rng.normal(size=v.shape).astype("float32") * 1e4 for v in model.trainable_variables]
    direction = np.concatenate([g.ravel() for g in grads]).astype("float64")
    direction /= np.linalg.norm(direction)

    def step(m, expected_lr):
        before = np.concatenate([v.numpy().ravel() for v in m.trainable_variables])
        m.optimizer.apply_gradients(zip([keras.ops.convert_to_tensor(g) for g in grads], m.trainable_variables))
        delta = np.concatenate([v.numpy().ravel() for v in m.trainable_variables]) - before
        assert np.linalg.norm(delta) == pytest.approx(expected_lr, rel=1e-4)
        np.testing.assert_allclose(delta, -expected_lr * direction, atol=2e-7)

    step(model, lr)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras")
    inner = []
    for m in (model, reloaded):
        if precision == "mixed_float16":
            assert isinstance(m.optimizer, keras.optimizers.LossScaleOptimizer)
            inner.append(m.optimizer.inner_optimizer)
        else:
            inner.append(m.optimizer)
    assert [type(o) for o in inner] == [training.SGD, training.SGD]  # the class that clips after the all-reduce
    assert inner[1].get_config() == inner[0].get_config() and inner[1].use_ema and inner[1].ema_momentum == 0.9
    for a, b in zip(reloaded.optimizer.variables, model.optimizer.variables):  # step counter, weight averages
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    step(reloaded, lr * 0.5 * (1 + np.cos(np.pi * 1 / total)))  # cosine decay, second step


@pytest.mark.float16_matmul
def test_mixed_float16_trains_with_loss_scaling_around_the_keras_vit_adamw(policy, tmp_path):
    policy("mixed_float16")
    model = _tiny_vit()
    training.compile_model(model, total_steps=4, learning_rate=1e-2, weight_decay=0.1)
    assert model.jit_compile is XLA_BY_DEFAULT
    opt = model.optimizer
    assert isinstance(opt, keras.optimizers.LossScaleOptimizer) and type(opt.inner_optimizer) is training.AdamW
    assert opt.inner_optimizer.global_clipnorm == 1.0
    x, y = _tiny_data()
    before = [v.numpy() for v in model.trainable_variables]
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert int(opt.iterations) == 4  # no step skipped for an overflow
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    assert all(changed)
    assert model.predict(x, verbose=0).dtype == np.float32 and model.get_layer("patch_encoder").compute_dtype == "float16"
    model.save(tmp_path / "m.keras")
    policy("float32")  # a new session: Keras' own wrapping would be lost, and the optimizer state with it
    again = keras.saving.load_model(tmp_path / "m.keras").optimizer
    assert isinstance(again, keras.optimizers.LossScaleOptimizer) and type(again.inner_optimizer) is training.AdamW
    assert int(again.iterations) == 4 and float(again.dynamic_scale) == float(opt.dynamic_scale)
    assert again.inner_optimizer.get_config() == opt.inner_optimizer.get_config()
    assert again.inner_optimizer.get_config()["exclude_from_weight_decay_names"] == list(NOT_DECAYED)


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_pure_16_bit_policies_are_refused_with_the_mixed_policy_to_use(policy, precision):
    policy(precision)
    model = _tiny_vit()
    with pytest.raises(ValueError, match=rf"dtype policy '{precision}'.*'mixed_{precision}' policy instead"):
        training.compile_model(model, total_steps=4)


DETERMINISM = r"""
import json, warnings
import tensorflow as tf
tf.config.experimental.enable_op_determinism()  # process-global: this test runs in its own process
import keras, numpy as np
from keras_vit import VisionTransformer, distribute, training
warnings.filterwarnings("error", "Model doesn't support")  # Keras' silent fall-back must not be reached

def tiny():
    return VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32,
                             input_shape=(8, 8, 3), classes=3, classifier_activation=None)

x = np.random.default_rng(0).uniform(-1, 1, (8, 8, 8, 3)).astype("float32")
y = np.arange(8) % 3
result = {"enabled": training.op_determinism_enabled()}
try:
    training.compile_model(tiny(), total_steps=4, jit_compile=True)
except RuntimeError as e:
    result["error"] = str(e)
result["auto_jit_compile"] = training.compile_model(tiny(), total_steps=4).jit_compile  # issue 29: "auto" steps aside
result["losses"] = []
for _ in range(2):
    keras.utils.set_random_seed(0)
    model = tiny()
    training.compile_model(model, total_steps=4, jit_compile=False)
    result["losses"].append(model.fit(x, y, batch_size=4, epochs=2, verbose=0).history["loss"])
strategy = tf.distribute.get_strategy()
result["auto"] = distribute.choose_xla("auto", strategy, "float32")
try:
    distribute.choose_xla("on", strategy, "float32")
except ValueError as e:
    result["on"] = str(e)
print("RESULT", json.dumps(result))
"""


@pytest.mark.tensorflow_only  # TensorFlow's op determinism
def test_op_determinism_is_named_as_the_reason_xla_is_off():
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_DETERMINISTIC_OPS", None)
    run = subprocess.run([sys.executable, "-c", DETERMINISM], capture_output=True, text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert result["enabled"] is True
    assert "op determinism is on" in result["error"] and "Pass jit_compile=False" in result["error"]
    assert "a layer of the model does not support XLA" not in result["error"]
    # issue 29: the default "auto" trains without XLA and says why in one log line, as keras-vit-train --xla auto
    assert result["auto_jit_compile"] is False
    said = [line for line in run.stderr.splitlines() if "compile_model(jit_compile='auto')" in line]
    assert len(said) == 1 and "op determinism is on" in said[0] and "without XLA" in said[0], run.stderr[-2000:]
    first, second = result["losses"]
    assert first == second and all(np.isfinite(first))  # without XLA, deterministic: the same losses twice
    assert result["auto"][0] is False and "op determinism is on" in result["auto"][1]
    assert result["on"].startswith("--xla on: TensorFlow's op determinism is on")
    assert training.op_determinism_enabled() is False  # this process was left alone


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_trap_behind_the_refusal_keras_adam_makes_no_step_on_bfloat16_weights(policy, dtype):
    """beta_2 = 0.999 rounds to 1.0 in bfloat16, so Adam's step size lr * sqrt(1 - beta_2^t) / (1 - beta_1^t) is 0."""
    policy(dtype)
    layer = keras.layers.Dense(4)
    layer.build((None, 4))
    before = layer.kernel.numpy().astype("float32")
    opt = training.AdamW(learning_rate=0.1, weight_decay=0.0)
    for _ in range(3):
        opt.apply_gradients([(keras.ops.ones((4, 4), dtype), layer.kernel)])
    moved = layer.kernel.numpy().astype("float32") - before
    if dtype == "bfloat16":
        np.testing.assert_array_equal(moved, 0.0)
    else:  # Adam's first steps on a constant gradient move each weight by about lr
        np.testing.assert_allclose(moved, -0.3, rtol=1e-3)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_jit_compile_is_auto_or_a_bool(tiny_config, value):
    model = VisionTransformer(**tiny_config)
    with pytest.raises(ValueError, match=rf"`jit_compile` must be 'auto', True or False. Received: jit_compile={value!r}"):
        training.compile_model(model, total_steps=2, jit_compile=value)
    training.compile_model(model, total_steps=2, jit_compile="auto")
    assert model.jit_compile is XLA_BY_DEFAULT  # XLA on TensorFlow and JAX; no torch.compile on PyTorch


def test_a_keras_quantized_model_is_refused(tiny_config):
    model = VisionTransformer(**tiny_config)
    model.quantize("int8")
    assert model.get_layer("predictions").dtype_policy.name.startswith("int8")  # the head too (ClassifierHead)
    with pytest.raises(ValueError, match=r"`model`: model .* was quantised with model.quantize \(\d+ int8 layers.*Train the float model, then quantise"):
        training.compile_model(model, total_steps=2)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="JAX's CPU backend only")
def test_mixed_float16_is_refused_on_jax_cpu(policy, tiny_config):
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("a JAX GPU or TPU computes float16")
    policy("mixed_float16")
    model = VisionTransformer(**tiny_config)
    with pytest.raises(ValueError, match=r"computes in float16 \(mixed_float16\), which JAX's CPU backend cannot"):
        training.compile_model(model, total_steps=2)
