"""keras_vit.layers.LayerNormalization / GroupNormalization: Keras' norms computed without a negation (issue 11, item 2)."""

import json
import zipfile

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import GroupNormalization, LayerNormalization


def _numpy_layer_norm(x, gamma, beta, eps):
    x = x.astype("float64")
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _randomise(layer, rng):
    layer.gamma.assign(rng.normal(1.0, 0.5, layer.gamma.shape).astype("float32"))
    layer.beta.assign(rng.normal(0.0, 0.5, layer.beta.shape).astype("float32"))


@pytest.mark.parametrize("eps", [1e-6, 1e-3])
def test_matches_numpy_and_keras_layer_norm(eps):
    rng = np.random.default_rng(0)
    # offset inputs: the centring matters (a large mean, a small spread)
    x = (rng.normal(3.0, 0.7, (2, 5, 48))).astype("float32")
    ours = LayerNormalization(epsilon=eps)
    theirs = keras.layers.LayerNormalization(epsilon=eps)
    ours.build(x.shape)
    theirs.build(x.shape)
    _randomise(ours, rng)
    theirs.set_weights(ours.get_weights())
    got = keras.ops.convert_to_numpy(ours(x))
    assert got.shape == x.shape and got.dtype == np.float32
    reference = _numpy_layer_norm(x, ours.gamma.numpy(), ours.beta.numpy(), eps)
    np.testing.assert_allclose(got, reference, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(theirs(x)), atol=2e-5, rtol=0)


def test_group_norm_matches_numpy_and_keras_group_norm():
    rng = np.random.default_rng(5)
    x = rng.normal(2.0, 0.8, (2, 5, 4, 64)).astype("float32")
    ours = GroupNormalization(32, epsilon=1e-6, name="gn")
    theirs = keras.layers.GroupNormalization(32, epsilon=1e-6, name="gn")
    ours.build(x.shape)
    theirs.build(x.shape)
    _randomise(ours, rng)
    theirs.set_weights(ours.get_weights())
    assert ours.get_config() == theirs.get_config()
    got = keras.ops.convert_to_numpy(ours(x))
    grouped = x.reshape(2, 5, 4, 32, 2).astype("float64")
    mean = grouped.mean((1, 2, 4), keepdims=True)
    var = ((grouped - mean) ** 2).mean((1, 2, 4), keepdims=True)
    reference = ((grouped - mean) / np.sqrt(var + 1e-6)).reshape(x.shape) * ours.gamma.numpy() + ours.beta.numpy()
    np.testing.assert_allclose(got, reference, atol=2e-5, rtol=0)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(theirs(x)), atol=2e-5, rtol=0)
    assert keras.saving.serialize_keras_object(ours)["registered_name"] == "keras_vit>GroupNormalization"


def test_half_precision_is_normalised_in_float32_and_returned_in_the_compute_dtype():
    rng = np.random.default_rng(1)
    x = rng.normal(0.0, 3.0, (3, 7, 32)).astype("float16")
    layer = LayerNormalization(epsilon=1e-6, dtype="mixed_float16")
    got = layer(x)
    assert keras.backend.standardize_dtype(got.dtype) == "float16"
    reference = _numpy_layer_norm(x.astype("float32"), 1.0, 0.0, 1e-6)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got).astype("float32"), reference, atol=4e-3, rtol=0)


@pytest.mark.skipif(keras.backend.backend() == "torch", reason="Keras 3.15's own LayerNormalization fails on PyTorch "
                    "for an axis other than the last (torch's layer_norm normalises trailing axes only); ViT never uses one")
def test_other_axes_and_rms_scaling_fall_back_to_keras():
    rng = np.random.default_rng(2)
    x = rng.normal(0.0, 1.0, (2, 4, 6)).astype("float32")
    for kwargs in ({"axis": 1}, {"axis": [1, 2]}):
        ours, theirs = LayerNormalization(**kwargs), keras.layers.LayerNormalization(**kwargs)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours(x)), keras.ops.convert_to_numpy(theirs(x)), atol=1e-6)


def test_same_config_variables_and_a_round_trip_under_its_own_name():
    layer = LayerNormalization(epsilon=1e-6, name="encoder_norm")
    layer.build((None, 5, 16))
    reference = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")
    reference.build((None, 5, 16))
    assert layer.get_config() == reference.get_config()
    assert [v.path for v in layer.weights] == [v.path for v in reference.weights]
    serialized = keras.saving.serialize_keras_object(layer)
    assert serialized["registered_name"] == "keras_vit>LayerNormalization"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert type(restored) is LayerNormalization and restored.get_config() == layer.get_config()


def _tiny_vit():
    keras.utils.set_random_seed(0)
    return keras_vit.VisionTransformer(
        patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        input_shape=(16, 16, 3), classes=5, classifier_activation=None,
    )


def _randomise_norms(model, rng):
    block = model.get_layer("transformer_block_0")
    for layer in (block.norm_1, block.norm_2, model.get_layer("encoder_norm")):
        _randomise(layer, rng)


def test_vit_uses_it_and_new_keras_files_load_it(tmp_path):
    model = _tiny_vit()
    block = model.get_layer("transformer_block_0")
    assert all(type(n) is LayerNormalization for n in (block.norm_1, block.norm_2, model.get_layer("encoder_norm")))
    rng = np.random.default_rng(3)
    _randomise_norms(model, rng)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    model.save(tmp_path / "new.keras")
    loaded = keras.saving.load_model(tmp_path / "new.keras")
    assert type(loaded.get_layer("encoder_norm")) is LayerNormalization
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(model(x)))


def test_keras_files_saved_before_it_still_load_and_give_the_same_outputs(tmp_path):
    """A file written before this layer names keras' own LayerNormalization for `encoder_norm`.

    The file is rewritten to exactly that form (the config entry Keras 3.15
    writes for its own layer); the TransformerBlock's norms are built in
    `build`, so their class never was in the file.
    """
    model = _tiny_vit()
    rng = np.random.default_rng(4)
    _randomise_norms(model, rng)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    new, old = tmp_path / "new.keras", tmp_path / "old.keras"
    model.save(new)
    with zipfile.ZipFile(new) as source, zipfile.ZipFile(old, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                (entry,) = [layer for layer in config["config"]["layers"] if layer["name"] == "encoder_norm"]
                assert entry["registered_name"] == "keras_vit>LayerNormalization"
                entry.update(module="keras.layers", class_name="LayerNormalization", registered_name=None)
                data = json.dumps(config)
            target.writestr(item, data)
    loaded = keras.saving.load_model(old)
    assert type(loaded.get_layer("encoder_norm")) is keras.layers.LayerNormalization
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(model(x)), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(loaded.get_layer("encoder_norm").gamma.numpy(), model.get_layer("encoder_norm").gamma.numpy())
