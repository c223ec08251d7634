"""keras_vit.resize: a trained model at another resolution (paper Sec. 3.2; issue 13, item 3)."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import resample_position_embedding

KINDS = ("learned", "learned_2d", "sincos_2d", "none")
SMALL = {"patch_size": 4, "hidden_size": 32, "num_layers": 1, "num_heads": 2, "mlp_dim": 32, "classes": 3,
         "classifier_activation": None}


def _model(input_shape=(16, 16, 3), seed=0, **overrides):
    """A tiny ViT with every weight random (the zero head would make all outputs equal)."""
    model = keras_vit.VisionTransformer(**{**SMALL, "input_shape": input_shape, **overrides})
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(rng.normal(0.0, 0.5, variable.shape).astype("float32"))
    return model


def _images(height, width, seed=1):
    return np.random.default_rng(seed).normal(size=(2, height, width, 3)).astype("float32")


def _offline(model, new_shape, interpolation="bilinear", **overrides):
    """The reference: the builder at `new_shape`, weights copied, tables resampled by keras_vit.weights."""
    reference = keras_vit.VisionTransformer(**{**SMALL, "input_shape": new_shape, **overrides})
    old, new = model.get_layer("patch_encoder"), reference.get_layer("patch_encoder")
    grid = (new_shape[0] // 4, new_shape[1] // 4)
    for layer in reference.layers:
        if layer.weights and layer is not new:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    new.projection.set_weights(old.projection.get_weights())
    if old.class_token:
        new.cls.assign(old.cls)
    if old.position_embedding_kind == "learned":
        new.position_embedding.assign(resample_position_embedding(
            keras.ops.convert_to_numpy(old.position_embedding), grid, int(old.class_token), interpolation=interpolation))
    elif old.position_embedding_kind == "learned_2d":
        x, y = keras.ops.convert_to_numpy(old.position_embedding_x), keras.ops.convert_to_numpy(old.position_embedding_y)
        new.position_embedding_x.assign(resample_position_embedding(x, (grid[1], 1), 0, (len(x), 1), interpolation)[0])
        new.position_embedding_y.assign(resample_position_embedding(y, (grid[0], 1), 0, (len(y), 1), interpolation)[0])
    return reference


def _dynamic(model, **overrides):
    """The model of any resolution with the same weights, built by the builder (runtime interpolation)."""
    dynamic = keras_vit.VisionTransformer(
        **{**SMALL, "input_shape": (None, None, 3), "position_embedding_grid": (4, 4), **overrides})
    for layer in dynamic.layers:
        if layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return dynamic


@pytest.mark.parametrize("kind", KINDS)
def test_at_the_build_size_outputs_and_weights_are_identical(kind):
    model = _model(position_embedding=kind)
    resized = keras_vit.resize(model, (16, 16, 3))
    x = _images(16, 16)
    assert resized is not model and resized.name == model.name
    assert [layer.name for layer in resized.layers] == [layer.name for layer in model.layers]
    assert [w.path for w in resized.weights] == [w.path for w in model.weights]
    for a, b in zip(resized.weights, model.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(resized(x)), keras.ops.convert_to_numpy(model(x)))


@pytest.mark.parametrize("kind,classifier", [
    ("learned", "token"), ("learned", "gap"), ("learned_2d", "token"), ("sincos_2d", "gap"), ("none", "token"),
])
def test_another_size_equals_an_offline_resampled_model_and_runtime_interpolation(kind, classifier):
    model = _model(position_embedding=kind, classifier=classifier)
    resized = keras_vit.resize(model, (24, 32, 3))  # grid 4x4 -> 6x8, rectangular
    reference = _offline(model, (24, 32, 3), position_embedding=kind, classifier=classifier)
    dynamic = _dynamic(model, position_embedding=kind, classifier=classifier)
    x = _images(24, 32)
    assert resized.input_shape == (None, 24, 32, 3)
    assert resized.get_layer("patch_encoder").grid_size == (6, 8)
    got = keras.ops.convert_to_numpy(resized(x))
    assert np.ptp(got) > 0.1  # a decisive output, not a constant
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(reference(x)), atol=1e-5, rtol=0)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(dynamic(x)), atol=1e-5, rtol=0)
    for a, b in zip(resized.weights, reference.weights):  # the tables themselves, and every other weight
        assert a.path == b.path
        np.testing.assert_allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b), atol=1e-6, rtol=0)


def test_interpolation_override_resamples_with_that_rule_and_keeps_it():
    model = _model()
    bicubic = keras_vit.resize(model, (24, 24, 3), interpolation="bicubic")
    bilinear = keras_vit.resize(model, (24, 24, 3))
    table = keras.ops.convert_to_numpy(bicubic.get_layer("patch_encoder").position_embedding)
    np.testing.assert_allclose(table, resample_position_embedding(
        keras.ops.convert_to_numpy(model.get_layer("patch_encoder").position_embedding), (6, 6), 1, interpolation="bicubic"), atol=1e-6)
    assert np.abs(table - keras.ops.convert_to_numpy(bilinear.get_layer("patch_encoder").position_embedding)).max() > 1e-3
    assert bicubic.get_layer("patch_encoder").interpolation == "bicubic"
    assert bilinear.get_layer("patch_encoder").interpolation == "bilinear"
    x = _images(24, 24)
    dynamic = _dynamic(model, position_embedding_interpolation="bicubic")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bicubic(x)), keras.ops.convert_to_numpy(dynamic(x)), atol=1e-5, rtol=0)


def test_hybrid_resizes_on_its_cell_and_matches_runtime_interpolation():
    hybrid = {"patch_size": 1, "resnet_num_layers": (1,)}  # output stride 4: cell 4 px, grid 4 at 16 px
    model = _model(**hybrid)
    resized = keras_vit.resize(model, (32, 24, 3))
    assert resized.get_layer("patch_encoder").grid_size == (8, 6)
    x = _images(32, 24)
    dynamic = _dynamic(model, **hybrid)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(resized(x)), keras.ops.convert_to_numpy(dynamic(x)), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(keras_vit.resize(model, (16, 16, 3))(_images(16, 16))),
                                  keras.ops.convert_to_numpy(model(_images(16, 16))))
    any_size = keras_vit.resize(model, (None, None, 3))
    assert any_size.get_layer("image_size_check").get_config()["stride"] == 4
    with pytest.raises(ValueError, match="output stride"):
        keras_vit.resize(model, (18, 16, 3))
    with pytest.raises(ValueError, match="Image height must be a multiple of patch_size=1 x the ResNet's output"):
        any_size(_images(18, 16))


def test_a_model_loaded_from_a_keras_file(tmp_path):
    model = _model(representation_size=16, position_embedding="learned_2d")
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    resized = keras_vit.resize(loaded, (24, 24, 3))
    expected = _offline(model, (24, 24, 3), representation_size=16, position_embedding="learned_2d")
    x = _images(24, 24)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(resized(x)), keras.ops.convert_to_numpy(expected(x)), atol=1e-5, rtol=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(resized.get_layer("pre_logits").kernel),
                                  keras.ops.convert_to_numpy(model.get_layer("pre_logits").kernel))


def test_any_resolution_and_back():
    model = _model()
    any_size = keras_vit.resize(model, (None, None, 3))
    assert any_size.input_shape == (None, None, None, 3)
    assert any_size.get_layer("patch_encoder").grid_size == (4, 4)  # the trained grid is kept
    assert any_size.get_layer("patches").flatten is False
    assert [layer.name for layer in any_size.layers][:3] == ["images", "image_size_check", "patches"]
    x16, x24 = _images(16, 16), _images(24, 24)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(any_size(x16)), keras.ops.convert_to_numpy(model(x16)), atol=1e-6, rtol=0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(any_size(x24)), keras.ops.convert_to_numpy(keras_vit.resize(model, (24, 24, 3))(x24)),
                               atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="patch_size=4"):
        any_size(_images(18, 16))
    back = keras_vit.resize(any_size, (16, 16, 3))
    assert [layer.name for layer in back.layers] == [layer.name for layer in model.layers]
    assert back.get_layer("patches").flatten is True
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(back(x16)), keras.ops.convert_to_numpy(model(x16)))
    tall = keras_vit.resize(model, (None, 16, 3))  # one side free
    assert tall.input_shape == (None, None, 16, 3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(tall(_images(32, 16))), keras.ops.convert_to_numpy(any_size(_images(32, 16))), atol=1e-6)


def test_a_model_built_for_any_resolution_becomes_fixed():
    model = _model(input_shape=(None, None, 3), position_embedding_grid=(4, 4), position_embedding="learned_2d")
    fixed = keras_vit.resize(model, (24, 16, 3))
    assert "image_size_check" not in [layer.name for layer in fixed.layers]
    assert fixed.get_layer("patch_encoder").position_embedding_y.shape == (6, 16)
    x = _images(24, 16)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(fixed(x)), keras.ops.convert_to_numpy(model(x)), atol=1e-5, rtol=0)


def test_backbone_without_head_gives_the_longer_sequence():
    model = _model(include_top=False)
    resized = keras_vit.resize(model, (24, 32, 3))
    assert resized.output_shape == (None, 1 + 6 * 8, 32)
    assert resized(_images(24, 32)).shape == (2, 49, 32)


def test_dtype_policy_and_trainable_flags_are_kept(policy):
    policy("mixed_bfloat16")
    model = _model()
    model.get_layer("transformer_block_0").trainable = False
    policy("float32")  # resize must not take the global policy
    resized = keras_vit.resize(model, (24, 24, 3))
    for layer in model.layers[1:]:  # the InputLayer's policy comes back from its config as its dtype, as in .keras
        assert resized.get_layer(layer.name).dtype_policy.name == layer.dtype_policy.name
    assert resized.get_layer("patch_encoder").dtype_policy.name == "mixed_bfloat16"
    assert resized.get_layer("transformer_block_0").trainable is False
    assert keras.backend.standardize_dtype(resized(_images(24, 24)).dtype) == "float32"


@pytest.mark.parametrize("input_shape,message", [
    ((18, 16, 3), "multiples of `patch_size`"),
    ((16, 16, 1), "model's 3 channels"),
    ((16, 16), "input_shape=\\(16, 16\\)"),
    ("16", "input_shape='16'"),
    ((0, 16, 3), "positive ints"),
    ((2, 16, 3), "must not exceed"),
])
def test_bad_input_shape_is_refused_with_its_value(input_shape, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.resize(_model(), input_shape)


def test_a_model_that_is_not_a_keras_vit_model_is_refused():
    inputs = keras.Input((16, 16, 3))
    plain = keras.Model(inputs, keras.layers.Dense(2, name="patches")(inputs), name="plain")
    with pytest.raises(ValueError, match="model='plain' of type Functional"):
        keras_vit.resize(plain, (16, 16, 3))
    with pytest.raises(ValueError, match=r"keras.Model\)\. Received: model=.a string. of type str"):
        keras_vit.resize("a string", (16, 16, 3))
    with pytest.raises(ValueError, match="interpolation='nearest'"):
        keras_vit.resize(_model(), (16, 16, 3), interpolation="nearest")


def test_a_model_whose_encoder_has_no_grid_size_in_its_config():
    """`.keras` files written before issue 13 hold a PatchEncoder config without `grid_size`."""
    model = _model()
    config = model.get_config()
    for layer in config["layers"]:
        if layer["name"] == "patch_encoder":
            del layer["config"]["grid_size"], layer["config"]["position_embedding"], layer["config"]["interpolation"]
    old = keras.Model.from_config(config)
    old.set_weights(model.get_weights())
    assert old.get_layer("patch_encoder").grid_size is None
    x = _images(24, 32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(keras_vit.resize(old, (24, 32, 3))(x)),
                               keras.ops.convert_to_numpy(_offline(model, (24, 32, 3))(x)), atol=1e-5, rtol=0)


def test_the_original_model_is_untouched_after_the_resized_one_runs_and_trains():
    """On JAX, the class token was assigned variable to variable: the two models shared one buffer, which the
    resized model's first jitted call freed ("Array has been deleted" in the original afterwards)."""
    model = _model()
    x = _images(16, 16)
    before = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    resized = keras_vit.resize(model, (24, 24, 3))
    resized.predict(_images(24, 24), verbose=0)
    resized.compile(optimizer="sgd", loss="mse")
    resized.fit(_images(24, 24), np.zeros((2, 3), "float32"), verbose=0)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.predict(x, verbose=0)), before)
