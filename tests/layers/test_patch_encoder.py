import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.layers import PatchEncoder


def test_equation_1_against_numpy():
    """z0 = [x_class; x_p E] + E_pos, computed by hand from the layer's own weights."""
    rng = np.random.default_rng(0)
    patches = rng.normal(size=(3, 6, 12)).astype("float32")
    layer = PatchEncoder(8)
    layer.build(patches.shape)
    cls = rng.normal(size=(1, 1, 8)).astype("float32")
    layer.cls.assign(cls)
    kernel, bias = (w.numpy() for w in layer.projection.weights)
    pos = layer.position_embedding.numpy()
    expected = np.concatenate([np.repeat(cls, 3, axis=0), patches @ kernel + bias], axis=1) + pos
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(patches)), expected, atol=1e-5)


def test_initialisation():
    layer = PatchEncoder(64)
    layer.build((None, 196, 48))
    assert layer.cls.shape == (1, 1, 64)
    np.testing.assert_array_equal(layer.cls.numpy(), 0.0)
    pos = layer.position_embedding.numpy()
    assert pos.shape == (1, 197, 64)
    assert abs(pos.std() - 0.02) < 0.002 and abs(pos.mean()) < 0.002


def test_without_class_token():
    layer = PatchEncoder(16, class_token=False)
    out = layer(np.zeros((2, 9, 12), "float32"))
    assert out.shape == (2, 9, 16)
    assert layer.position_embedding.shape == (1, 9, 16)
    assert len(layer.weights) == 3  # kernel, bias, position embedding
    assert layer.compute_output_shape((None, 9, 12)) == (None, 9, 16)


def test_shapes_symbolic_eager_and_batches():
    layer = PatchEncoder(16)
    assert tuple(layer(keras.Input((9, 12))).shape) == (None, 10, 16)
    assert layer.compute_output_shape((None, 9, 12)) == (None, 10, 16)
    for batch in (1, 4):
        assert layer(np.zeros((batch, 9, 12), "float32")).shape == (batch, 10, 16)


def test_dropout_only_in_training():
    layer = PatchEncoder(16, dropout_rate=0.5)
    x = np.ones((4, 9, 12), "float32")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), keras.ops.convert_to_numpy(layer(x, training=False)))
    assert not np.allclose(keras.ops.convert_to_numpy(layer(x, training=True)), keras.ops.convert_to_numpy(layer(x)))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"hidden_size": 0}, r"`hidden_size` must be a positive int. Received: hidden_size=0"),
        ({"hidden_size": 8, "dropout_rate": 1.0}, r"`dropout_rate` must be a float in \[0, 1\). Received: dropout_rate=1.0"),
        ({"hidden_size": 8, "dropout_rate": -0.1}, r"Received: dropout_rate=-0.1"),
        ({"hidden_size": 8, "class_token": "yes"}, r"`class_token` must be True or False"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PatchEncoder(**kwargs)


def test_unknown_num_patches():
    with pytest.raises(ValueError, match=r"num_patches and patch_dim known"):
        PatchEncoder(8).build((None, None, 12))


def test_mixed_precision(policy):
    policy("mixed_bfloat16")
    layer = PatchEncoder(8)
    out = layer(np.zeros((2, 4, 12), "float32"))
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in layer.weights)


def test_config_round_trip():
    layer = PatchEncoder(8, class_token=False, dropout_rate=0.1)
    config = layer.get_config()
    assert json.dumps(PatchEncoder.from_config(config).get_config()) == json.dumps(config)
    assert {k: config[k] for k in ("hidden_size", "class_token", "dropout_rate")} == {
        "hidden_size": 8,
        "class_token": False,
        "dropout_rate": 0.1,
    }
