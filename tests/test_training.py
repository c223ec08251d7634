import keras
import numpy as np
import pytest

from keras_vit import VisionTransformer, training


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
    loss = training.SparseCategoricalCrossentropyWithSmoothing(s, from_logits=True)
    assert float(loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    plain = training.SparseCategoricalCrossentropyWithSmoothing(0.0, from_logits=True)
    assert float(plain(labels, logits)) == pytest.approx(float(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True).numpy().mean()), rel=1e-5)


def test_compile_holds_xla_and_recipe(tiny_config):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(model, total_steps=100, warmup_steps=10, label_smoothing=0.1)
    assert model.jit_compile is True
    opt = model.optimizer
    assert isinstance(opt, keras.optimizers.AdamW) and opt.global_clipnorm == 1.0
    assert isinstance(model.loss, training.SparseCategoricalCrossentropyWithSmoothing) and model.loss.from_logits
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
        training.compile_model(model, total_steps=10, from_logits=True)


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
