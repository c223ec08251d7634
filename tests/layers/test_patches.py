import numpy as np
import pytest
import tensorflow as tf

import keras
from keras_vit.layers import Patches


def reference_patches(images, p):
    """Patches by explicit loops, in row-major order, each flattened (row, col, channel)."""
    b, h, w, c = images.shape
    out = []
    for n in range(b):
        seq = []
        for i in range(h // p):
            for j in range(w // p):
                seq.append(images[n, i * p : (i + 1) * p, j * p : (j + 1) * p, :].reshape(-1))
        out.append(seq)
    return keras.ops.convert_to_numpy(out)


@pytest.mark.parametrize("shape,p", [((2, 8, 8, 3), 4), ((3, 12, 8, 1), 4), ((1, 6, 9, 2), 3), ((2, 4, 4, 3), 1)])
def test_matches_loop_reference(shape, p):
    images = np.random.default_rng(0).uniform(0, 255, shape).astype("float32")
    got = keras.ops.convert_to_numpy(Patches(p)(images))
    np.testing.assert_array_equal(got, reference_patches(images, p))


def test_equals_strided_convolution():
    """Patches + matmul with the reshaped HWIO kernel equals the reference's strided conv."""
    rng = np.random.default_rng(1)
    images = rng.normal(size=(2, 12, 8, 3)).astype("float32")
    kernel = rng.normal(size=(4, 4, 3, 5)).astype("float32")
    conv = keras.ops.convert_to_numpy(tf.nn.conv2d(images, kernel, strides=4, padding="VALID")).reshape(2, -1, 5)
    got = keras.ops.convert_to_numpy(Patches(4)(images)) @ kernel.reshape(-1, 5)
    np.testing.assert_allclose(got, conv, atol=1e-5)


@pytest.mark.parametrize("dtype", ["uint8", "int32", "float16", "float64"])
def test_any_input_dtype_is_cast_to_compute_dtype(dtype):
    images = np.arange(2 * 4 * 4 * 3).reshape(2, 4, 4, 3).astype(dtype)
    out = Patches(2)(images)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(out), reference_patches(images.astype("float32"), 2))


def test_symbolic_eager_and_compute_output_shape_agree():
    layer = Patches(4)
    symbolic = layer(keras.Input((8, 12, 3)))
    assert tuple(symbolic.shape) == (None, 6, 48)
    assert layer.compute_output_shape((None, 8, 12, 3)) == (None, 6, 48)
    for batch in (1, 3):
        assert Patches(4)(np.zeros((batch, 8, 12, 3), "float32")).shape == (batch, 6, 48)


@pytest.mark.tensorflow_only
def test_unknown_batch_in_tf_function():
    layer = Patches(2)
    fn = tf.function(layer, input_signature=[tf.TensorSpec((None, 4, 6, 3), tf.float32)])
    assert fn(tf.zeros((5, 4, 6, 3))).shape == (5, 6, 12)


@pytest.mark.parametrize("bad", [0, -2, 2.0, True, "4", None])
def test_bad_patch_size(bad):
    with pytest.raises(ValueError, match=r"`patch_size` must be a positive int. Received: patch_size="):
        Patches(bad)


@pytest.mark.parametrize("shape", [(None, 10, 8, 3), (None, 8, 10, 3), (None, 2, 8, 3)])
def test_indivisible_or_too_small_image(shape):
    with pytest.raises(ValueError, match=r"must be a multiple of patch_size=4"):
        Patches(4).build(shape)


def test_wrong_rank():
    with pytest.raises(ValueError, match=r"\(batch, height, width, channels\)"):
        Patches(4).build((None, 8, 8))


def test_mixed_bfloat16_output(policy):
    policy("mixed_bfloat16")
    out = Patches(2)(np.ones((1, 4, 4, 3), "uint8"))
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"


def test_config_round_trip():
    layer = Patches(7, name="p")
    clone = Patches.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    assert layer.get_config()["patch_size"] == 7
