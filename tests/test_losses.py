"""keras_vit.losses: one loss and one accuracy for integer and Mixup / CutMix labels (issue 26)."""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

from keras_vit import VisionTransformer, losses, training
from tests.conftest import XLA_BY_DEFAULT

LOGITS = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 0.3], [-0.5, 1.5, 0.0]], "float32")


def _log_softmax(logits):
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_soft_labels_give_the_formula_and_one_hot_equals_integers(smoothing):
    soft = np.array([[0.7, 0.3, 0.0], [0.0, 0.5, 0.5], [0.0, 1.0, 0.0]], "float32")
    targets = (1 - smoothing) * soft + smoothing / 3
    expected = -(targets * _log_softmax(LOGITS)).sum(-1).mean()
    loss = losses.Crossentropy(smoothing, from_logits=True)
    assert float(loss(soft, LOGITS)) == pytest.approx(expected, rel=1e-5)
    labels = np.array([0, 2, 1])
    assert float(loss(labels, LOGITS)) == pytest.approx(float(loss(np.eye(3, dtype="float32")[labels], LOGITS)), rel=1e-5)
    assert float(loss(labels[:, None], LOGITS)) == pytest.approx(float(loss(labels, LOGITS)), rel=1e-6)
    probabilities = np.exp(_log_softmax(LOGITS))
    on_probabilities = losses.Crossentropy(smoothing, from_logits=False)(soft, probabilities)
    assert float(on_probabilities) == pytest.approx(expected, rel=1e-4)


def test_accuracy_reads_the_dominant_class_of_a_soft_label():
    soft = np.array([[0.7, 0.3, 0.0], [0.1, 0.2, 0.7], [0.4, 0.6, 0.0]], "float32")  # classes 0, 2, 1
    np.testing.assert_array_equal(ops.convert_to_numpy(losses.accuracy(soft, LOGITS)), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(ops.convert_to_numpy(losses.accuracy(np.array([0, 1, 0]), LOGITS)), [1.0, 0.0, 0.0])
    metric = losses.Accuracy()
    metric.update_state(soft, LOGITS)
    metric.update_state(np.array([0, 1, 0]), LOGITS)
    assert metric.name == "accuracy" and float(metric.result()) == pytest.approx(4 / 6)
    assert losses.Accuracy.from_config(metric.get_config()).name == "accuracy"


def test_loss_config_round_trips_and_the_old_name_loads():
    loss = losses.Crossentropy(0.1, from_logits=True)
    again = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(again, losses.Crossentropy) and again.label_smoothing == 0.1 and again.from_logits
    old = keras.losses.deserialize(keras.losses.serialize(losses.SparseCategoricalCrossentropyWithSmoothing(0.2)))
    assert isinstance(old, losses.Crossentropy) and old.label_smoothing == 0.2


def test_fit_on_soft_labels_validates_on_integer_labels_under_xla(tiny_config):
    """The bar: Mixup's labels in training, integer ones held out, one compiled model, XLA kept, no fall-back."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 16, 16, 3)).astype("float32")
    labels = rng.integers(0, 5, 32)
    weights = rng.uniform(0.5, 1.0, (32, 1)).astype("float32")
    soft = weights * np.eye(5, dtype="float32")[labels] + (1 - weights) * np.eye(5, dtype="float32")[labels[::-1]]
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    training.compile_model(model, total_steps=4, label_smoothing=0.1)
    assert model.jit_compile is XLA_BY_DEFAULT
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*jit_compile.*")  # Keras' XLA fall-back is a warning
        history = model.fit(x, soft, validation_data=(x, labels), batch_size=16, epochs=2, verbose=0)
    assert model.jit_compile is XLA_BY_DEFAULT
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history.history)
    logits = ops.convert_to_numpy(model(x))
    assert history.history["val_accuracy"][-1] == pytest.approx(float((logits.argmax(-1) == labels).mean()))
    expected = -((0.9 * np.eye(5)[labels] + 0.02) * _log_softmax(logits)).sum(-1).mean()
    assert history.history["val_loss"][-1] == pytest.approx(expected, rel=1e-4)
