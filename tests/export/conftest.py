"""A tiny ViT trained for a few seconds on digits, shared by the export tests."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import data, training
from tests import shared_cache


def _train_tiny_vit(folder):
    """Trains the tiny ViT into `folder`: tiny.keras and held_out.npz (96 held-out digits in [-1, 1], labels)."""
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
    model.save(folder / "tiny.keras")
    np.savez(folder / "held_out.npz", images=images.numpy(), labels=labels.numpy())


@pytest.fixture(scope="session")
def trained_vit(tmp_path_factory):
    """(model, path of its .keras file, held-out images in [-1, 1], labels).

    Trained once per `make test` run and shared by its test processes (tests/shared_cache.py); each process
    loads the same .keras file.
    """
    folder = shared_cache.folder("export_tiny_vit", _train_tiny_vit, tmp_path_factory)
    path = str(folder / "tiny.keras")
    held_out = np.load(folder / "held_out.npz")
    return keras.saving.load_model(path), path, held_out["images"], held_out["labels"]


@pytest.fixture
def batch(trained_vit):
    return trained_vit[2][:6]


def keras_outputs(model, x):
    return np.asarray(model.predict(x, verbose=0))
