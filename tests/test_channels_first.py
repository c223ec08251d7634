"""keras_vit is channels-last: under keras.config.set_image_data_format("channels_first") every
layer and builder that reads images refuses, naming the data format, instead of reading the
channels as the height (issue 12)."""

import contextlib

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import Patches, StdConv2D
from keras_vit.models import resnet

MESSAGE = (
    r"reads images as channels_last, \(batch, height, width, channels\): keras_vit does not support the "
    r"channels_first data format. Call keras.config.set_image_data_format\('channels_last'\) and give images "
    r"of shape \(batch, height, width, channels\). Received: "
)
GLOBAL = MESSAGE + r"keras.config.image_data_format\(\)='channels_first'"
TINY = dict(patch_size=3, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, classes=5)
HYBRID = dict(TINY, patch_size=1, resnet_num_layers=(1, 1))


@contextlib.contextmanager
def data_format(value):
    """Sets the global image data format inside the block, and restores the previous one after."""
    before = keras.config.image_data_format()
    keras.config.set_image_data_format(value)
    try:
        yield
    finally:
        keras.config.set_image_data_format(before)


@pytest.fixture
def channels_first():
    with data_format("channels_first"):
        yield


@pytest.fixture
def nothing_built(monkeypatch):
    """Fails the test if a builder gets as far as creating its input."""

    def refuse(*args, **kwargs):
        raise AssertionError("keras.Input was called: the model was being built")

    monkeypatch.setattr(keras, "Input", refuse)


def test_patches_refuses_at_build(channels_first):
    layer = Patches(3)  # no data format of its own: nothing to refuse before the input arrives
    with pytest.raises(ValueError, match="^Patches " + GLOBAL):
        layer(np.zeros((2, 3, 48, 48), "float32"))
    with pytest.raises(ValueError, match="^Patches " + GLOBAL):
        Patches(3)(keras.KerasTensor((None, 3, 48, 48)))
    assert not layer.built


def test_std_conv_refuses_the_global_channels_first(channels_first):
    with pytest.raises(ValueError, match=MESSAGE + r"data_format='channels_first' \(keras.config.image_data_format\(\)='channels_first'\)"):
        StdConv2D(4, 3)


def test_std_conv_refuses_an_explicit_channels_first():
    with pytest.raises(ValueError, match=MESSAGE + r"data_format='channels_first' \(keras.config.image_data_format\(\)='channels_last'\)"):
        StdConv2D(4, 3, data_format="channels_first")


def test_std_conv_given_channels_last_ignores_the_global_format(channels_first):
    """An explicit data_format='channels_last' is honoured, as for Keras' own Conv2D."""
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 3)).astype("float32")
    layer = StdConv2D(4, 3, padding="same", data_format="channels_last")
    out = keras.ops.convert_to_numpy(layer(x))
    with data_format("channels_last"):
        reference = StdConv2D.from_config(layer.get_config())
        reference.build(x.shape)
        reference.set_weights(layer.get_weights())
        expected = keras.ops.convert_to_numpy(reference(x))
    assert out.shape == (2, 8, 8, 4)
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)


def test_vision_transformer_refuses_before_building(channels_first, nothing_built):
    with pytest.raises(ValueError, match="^VisionTransformer " + GLOBAL):
        keras_vit.VisionTransformer(input_shape=(3, 48, 48), **TINY)  # the call


def test_hybrid_refuses_before_building(channels_first, nothing_built):
    # Refused ahead of the argument checks: (3, 32, 32) read as channels-last would fail on the stride.
    with pytest.raises(ValueError, match="^VisionTransformer " + GLOBAL):
        keras_vit.VisionTransformer(input_shape=(3, 32, 32), **HYBRID)


def test_resnet_features_refuses(channels_first):
    with pytest.raises(ValueError, match=r"^The hybrid's ResNet \(resnet_features\) " + GLOBAL):
        resnet.resnet_features(keras.KerasTensor((None, 3, 32, 32)), (1,))


@pytest.mark.parametrize("name", ["ViTTi16", "ViTR26S32"])
def test_variant_builders_refuse_before_building(channels_first, nothing_built, name):
    with pytest.raises(ValueError, match="^VisionTransformer " + GLOBAL):
        getattr(keras_vit, name)(include_top=False)


def test_every_hybrid_layer_is_channels_last_whatever_the_global_format(channels_first, monkeypatch):
    """No layer of the ResNet follows keras.config.image_data_format(): all are given channels_last.

    With the global guard switched off, the ResNet built under channels_first computes what the
    one built under channels_last computes, from the same weights.
    """
    monkeypatch.setattr(resnet, "check_channels_last", lambda where: None)
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, resnet.resnet_features(inputs, (1, 1)))
    formats = {layer.name: layer.data_format for layer in model.layers if hasattr(layer, "data_format")}
    assert "pool_root" in formats and "conv_root" in formats
    assert set(formats.values()) == {"channels_last"}, formats
    with data_format("channels_last"):
        inputs = keras.Input((32, 32, 3))
        reference = keras.Model(inputs, resnet.resnet_features(inputs, (1, 1)))
    rng = np.random.default_rng(1)
    weights = [rng.normal(scale=0.2, size=w.shape).astype("float32") for w in model.weights]
    model.set_weights(weights)
    reference.set_weights(weights)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    out = keras.ops.convert_to_numpy(model(x))
    assert out.shape == (2, 4, 4, 512)
    np.testing.assert_allclose(out, keras.ops.convert_to_numpy(reference(x)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("config", [TINY, HYBRID], ids=["vit", "hybrid"])
def test_loading_a_keras_file_under_channels_first_refuses(tmp_path, config):
    """A model saved channels-last does not load as channels-first: the build of `Patches` refuses."""
    model = keras_vit.VisionTransformer(input_shape=(48, 48, 3) if config is TINY else (32, 32, 3), **config)
    path = tmp_path / "model.keras"
    model.save(path)
    with data_format("channels_first"), pytest.raises(ValueError, match="^Patches " + GLOBAL):
        keras.saving.load_model(path)
    assert keras.saving.load_model(path).input_shape == model.input_shape
