"""A tiny ViT trained for a few seconds on digits, shared by the export tests."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import data, training


@pytest.fixture(scope="session")
def trained_vit(tmp_path_factory):
    """(model, path of its .keras file, held-out images in [-1, 1], labels)."""
    keras.utils.set_random_seed(0)
    train = data.digits("train", image_size=16, batch_size=64, seed=0)
    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        input_shape=(16, 16, 3), classes=10, classifier_activation=None, name="tiny_vit",
    )
    # 15 epochs: ~92% held-out accuracy, enough margin for the int8 top-1 agreement bar (97%).
    training.compile_model(model, total_steps=15 * int(train.cardinality()), learning_rate=3e-3)
    model.fit(train, epochs=15, verbose=0, shuffle=False)  # the pipeline shuffles
    (images, labels) = next(iter(data.digits("validation", image_size=16, batch_size=96)))
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    model.save(path)
    return model, str(path), images.numpy(), labels.numpy()


@pytest.fixture
def batch(trained_vit):
    return trained_vit[2][:6]


def keras_outputs(model, x):
    return np.asarray(model.predict(x, verbose=0))
