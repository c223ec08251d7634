"""Issue 13: the paper's position-embedding kinds (Appendix D.4) and models of any resolution."""

import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import training
from keras_vit.layers import ImageSizeCheck, PatchEncoder
from keras_vit.weights import CheckpointError, load_pretrained, resample_position_embedding
from keras_vit.weights.checkpoint import to_canonical_arrays
from tests.conftest import XLA_BY_DEFAULT

KINDS = ("learned", "learned_2d", "sincos_2d", "none")
CFG = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=32, classes=3)


def _sincos_by_hand(rows, cols, dim):
    """big_vision's posemb_sincos_2d, written out element by element."""
    quarter = dim // 4
    out = np.zeros((rows * cols, dim))
    for y in range(rows):
        for x in range(cols):
            for k in range(quarter):
                omega = 10000.0 ** (-k / (quarter - 1))
                out[y * cols + x, [k, quarter + k, 2 * quarter + k, 3 * quarter + k]] = [
                    math.sin(x * omega), math.cos(x * omega), math.sin(y * omega), math.cos(y * omega)
                ]
    return out


def _encoder(kind, grid=(3, 4), class_token=True, hidden=16):
    layer = PatchEncoder(hidden, class_token=class_token, position_embedding=kind, grid_size=grid)
    layer.build((None, grid[0], grid[1], 12))
    return layer


@pytest.mark.parametrize("grid", [(3, 4), (5, 2)])
def test_sincos_table_against_an_independent_formula(grid):
    layer = _encoder("sincos_2d", grid)
    table = keras.ops.convert_to_numpy(layer.position_table())
    np.testing.assert_array_equal(table[0], 0.0)  # the class token gets none
    np.testing.assert_allclose(table[1:], _sincos_by_hand(*grid, 16), atol=2e-6)
    assert layer.weights == [layer.cls, *layer.projection.weights]  # fixed: no weights of its own
    # at another grid it is computed there, not resampled
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.position_table(2, 6))[1:], _sincos_by_hand(2, 6, 16), atol=2e-6)


def test_learned_2d_concatenates_x_then_y_per_patch():
    layer = _encoder("learned_2d", (3, 4))
    rng = np.random.default_rng(1)
    x_table, y_table = rng.normal(size=(4, 8)), rng.normal(size=(3, 8))
    layer.position_embedding_x.assign(x_table)
    layer.position_embedding_y.assign(y_table)
    table = keras.ops.convert_to_numpy(layer.position_table())
    np.testing.assert_array_equal(table[0], 0.0)
    for r in range(3):
        for c in range(4):
            np.testing.assert_allclose(table[1 + r * 4 + c], np.concatenate([x_table[c], y_table[r]]), atol=1e-7)


@pytest.mark.parametrize("class_token", [True, False])
def test_equation_1_for_each_kind(class_token):
    """z0 = [x_class; x_p E] + E_pos by hand; 'none' adds nothing at all."""
    rng = np.random.default_rng(0)
    patches = rng.normal(size=(2, 3, 4, 12)).astype("float32")
    for kind in KINDS:
        layer = _encoder(kind, class_token=class_token)
        if class_token:
            layer.cls.assign(rng.normal(size=(1, 1, 16)))
        kernel, bias = (w.numpy() for w in layer.projection.weights)
        tokens = patches.reshape(2, 12, 12) @ kernel + bias
        if class_token:
            tokens = np.concatenate([np.repeat(layer.cls.numpy(), 2, axis=0), tokens], axis=1)
        table = 0.0 if kind == "none" else keras.ops.convert_to_numpy(layer.position_table())
        assert (kind == "none") == (layer.position_table() is None)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(patches)), tokens + table, atol=1e-5, err_msg=kind)


def _copy_weights(source, target, grid, interpolation="bilinear"):
    """Copies every weight of `source` into `target`, the learned tables resampled once by keras_vit.weights."""
    for layer in source.layers:
        if not layer.weights:
            continue
        twin = target.get_layer(layer.name)
        if layer.name != "patch_encoder":
            twin.set_weights(layer.get_weights())
            continue
        twin.projection.set_weights(layer.projection.get_weights())
        if layer.class_token:
            twin.cls.assign(layer.cls)
        prefix = int(layer.class_token)
        if layer.position_embedding_kind == "learned":
            twin.position_embedding.assign(resample_position_embedding(
                layer.position_embedding.numpy(), grid, prefix, layer.grid_size, interpolation))
        elif layer.position_embedding_kind == "learned_2d":
            for axis, size in (("x", grid[1]), ("y", grid[0])):
                table = keras.ops.convert_to_numpy(getattr(layer, f"position_embedding_{axis}"))
                resampled = resample_position_embedding(table, (size, 1), 0, (len(table), 1), interpolation)
                getattr(twin, f"position_embedding_{axis}").assign(resampled[0])


def _randomise(model, seed=0):
    rng = np.random.default_rng(seed)
    for v in model.weights:
        v.assign(rng.normal(scale=0.2, size=v.shape).astype("float32") + (1.0 if "gamma" in v.path else 0.0))


@pytest.mark.parametrize(
    "kind,interpolation,class_token,size",
    [
        ("learned", "bilinear", True, (24, 24)),
        ("learned", "bilinear", True, (12, 28)),
        ("learned", "bicubic", False, (20, 32)),
        ("learned", "bicubic", True, (8, 12)),
        ("learned_2d", "bilinear", True, (28, 20)),
        ("learned_2d", "bicubic", False, (24, 24)),
        ("sincos_2d", "bilinear", True, (12, 24)),
        ("none", "bilinear", False, (24, 16)),
    ],
)
def test_runtime_interpolation_equals_the_offline_resampler(kind, interpolation, class_token, size):
    kwargs = dict(CFG, position_embedding=kind, position_embedding_interpolation=interpolation,
                  class_token=class_token, classifier="token" if class_token else "gap")
    dynamic = keras_vit.VisionTransformer(input_shape=(None, None, 3), position_embedding_grid=(4, 4), **kwargs)
    _randomise(dynamic)
    grid = (size[0] // 4, size[1] // 4)
    fixed = keras_vit.VisionTransformer(input_shape=(*size, 3), **kwargs)
    _copy_weights(dynamic, fixed, grid, interpolation)
    images = np.random.default_rng(2).uniform(-1, 1, (2, *size, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(fixed(images))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(dynamic(images)), expected, atol=1e-5)
    np.testing.assert_allclose(dynamic.predict(images, verbose=0), expected, atol=1e-5)  # traced, not eager


def test_runtime_interpolation_in_a_hybrid():
    kwargs = dict(CFG, patch_size=1, resnet_num_layers=(1, 1))  # output stride 8
    dynamic = keras_vit.VisionTransformer(input_shape=(None, None, 3), position_embedding_grid=(2, 2), **kwargs)
    _randomise(dynamic, seed=3)
    fixed = keras_vit.VisionTransformer(input_shape=(24, 40, 3), **kwargs)
    _copy_weights(dynamic, fixed, (3, 5))
    images = np.random.default_rng(4).uniform(-1, 1, (1, 24, 40, 3)).astype("float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(dynamic(images)), keras.ops.convert_to_numpy(fixed(images)), atol=1e-5)
    with pytest.raises(ValueError, match=r"Image width must be a multiple of patch_size=1 x the ResNet's output "
                                         r"stride 8 = 8.*Received: an image of width 36"):
        dynamic(np.zeros((1, 24, 36, 3), "float32"))


@pytest.mark.parametrize("size,axis", [((18, 16), "height"), ((16, 2), "width"), ((16, 0), "width")])
def test_bad_sizes_raise_before_any_op(size, axis):
    model = keras_vit.VisionTransformer(input_shape=(None, None, 3), position_embedding_grid=(4, 4), **CFG)
    with pytest.raises(ValueError, match=rf"Image {axis} must be a multiple of patch_size=4 \(and at least that "
                                         rf"large\)\. Received: an image of {axis} {size[1] if axis == 'width' else size[0]}"):
        model(np.zeros((1, *size, 3), "float32"))
    with pytest.raises(ValueError, match=r"`patch_size` must be a positive int"):
        ImageSizeCheck(0)


def test_fit_with_xla_on_two_resolutions():
    """One model, batches of 16 and 24 px in one fit; finite loss; Keras' XLA fall-back is an error."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(input_shape=(None, None, 3), position_embedding_grid=(4, 4),
                                        classifier_activation=None, **CFG)
    training.compile_model(model, total_steps=4, from_logits=True)  # XLA on TensorFlow and JAX
    assert model.jit_compile is XLA_BY_DEFAULT
    rng = np.random.default_rng(0)
    small = tf.data.Dataset.from_tensor_slices((rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32"), np.arange(4) % 3))
    large = tf.data.Dataset.from_tensor_slices((rng.uniform(-1, 1, (4, 24, 24, 3)).astype("float32"), np.arange(4) % 3))
    data = small.batch(2).concatenate(large.batch(2))
    before = model.get_layer("patch_encoder").position_embedding.numpy()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", "Model doesn't support")
        history = model.fit(data, epochs=2, verbose=0)
    assert all(np.isfinite(history.history["loss"]))
    assert not np.allclose(model.get_layer("patch_encoder").position_embedding.numpy(), before)  # the table trains
    assert model.jit_compile is XLA_BY_DEFAULT


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_round_trips_through_keras_files(kind, tmp_path):
    for shape in ((16, 16, 3), (None, None, 3)):
        model = keras_vit.VisionTransformer(input_shape=shape, position_embedding=kind,
                                            position_embedding_grid=(4, 4), **CFG)
        _randomise(model, seed=5)
        images = np.random.default_rng(6).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
        model.save(tmp_path / "m.keras")
        loaded = keras.models.load_model(tmp_path / "m.keras")
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(images)), keras.ops.convert_to_numpy(model(images)))
        encoder = loaded.get_layer("patch_encoder")
        assert (encoder.position_embedding_kind, encoder.grid_size) == (kind, (4, 4))
        if shape[0] is None:
            bigger = np.random.default_rng(7).uniform(-1, 1, (1, 20, 28, 3)).astype("float32")
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(bigger)), keras.ops.convert_to_numpy(model(bigger)))


@pytest.mark.parametrize("kind", ["learned_2d", "sincos_2d", "none"])
def test_checkpoints_refuse_a_model_of_another_kind(kind, tmp_path):
    learned = keras_vit.VisionTransformer(input_shape=(16, 16, 3), **CFG)
    arrays = to_canonical_arrays(learned)
    other = keras_vit.VisionTransformer(input_shape=(16, 16, 3), position_embedding=kind, **CFG)
    with pytest.raises(CheckpointError, match=rf"learned 1D position embedding .* position_embedding='{kind}'"):
        load_pretrained(other, arrays)
    with pytest.raises(CheckpointError, match=rf"position_embedding='{kind}'"):
        to_canonical_arrays(other)
    load_pretrained(learned, arrays)  # the same kind loads


@pytest.mark.parametrize(
    "kwargs,shape,message",
    [
        ({"position_embedding": "rope"}, None, r"`position_embedding` must be one of .* Received: position_embedding='rope'"),
        ({"interpolation": "area"}, None, r"Received: interpolation='area'"),
        ({"position_embedding": "learned_2d", "hidden_size": 15}, None, r"must be even. Received: hidden_size=15"),
        ({"position_embedding": "sincos_2d", "hidden_size": 4}, None, r"multiple of 4 and at least 8. Received: hidden_size=4"),
        ({"grid_size": (0, 2)}, None, r"`grid_size` must be None or \(rows, cols\)"),
        ({"grid_size": (3, 3)}, (None, 12, 8), r"grid_size=\(3, 3\) expects 9 patches"),
        ({"position_embedding": "sincos_2d"}, (None, 12, 8), r"needs the patch grid: pass `grid_size"),
        ({}, (None, None, None, 8), r"needs `grid_size=\(rows, cols\)`"),
    ],
)
def test_bad_arguments(kwargs, shape, message):
    with pytest.raises(ValueError, match=message):
        layer = PatchEncoder(**{"hidden_size": 16, **kwargs})
        layer.build(shape)


def test_position_similarity_of_every_kind():
    from keras_vit import inspect

    for kind in ("learned", "learned_2d", "sincos_2d"):
        model = keras_vit.VisionTransformer(input_shape=(12, 16, 3), position_embedding=kind, **CFG)
        table = keras.ops.convert_to_numpy(model.get_layer("patch_encoder").position_table())[1:]
        unit = table / np.linalg.norm(table, axis=1, keepdims=True)
        similarity = inspect.position_embedding_similarity(model)
        assert similarity.shape == (3, 4, 3, 4)
        np.testing.assert_allclose(similarity[1, 2].ravel(), unit @ unit[1 * 4 + 2], atol=1e-5)
    none = keras_vit.VisionTransformer(input_shape=(12, 16, 3), position_embedding="none", **CFG)
    with pytest.raises(ValueError, match="position_embedding='none': it has no position embeddings"):
        inspect.position_embedding_similarity(none)
