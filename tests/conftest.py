"""Shared fixtures: tiny configurations, policy reset, GPU marker."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

TINY = {
    "patch_size": 4,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "mlp_dim": 64,
    "input_shape": (16, 16, 3),
    "classes": 5,
}


@pytest.fixture
def tiny_config():
    """A ViT small enough to build and run in well under a second."""
    return dict(TINY)


@pytest.fixture
def policy():
    """Yields a setter for the global dtype policy and restores float32 after."""
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


def pytest_collection_modifyitems(config, items):
    if tf.config.list_physical_devices("GPU"):
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
