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


@pytest.mark.tensorflow_only  # tf.data, TensorFlow's graph-mode check
def test_a_fixed_size_model_names_its_size_at_the_first_batch_of_another(tiny_config):
    """Issue 29, item 5: a 32 px model fed a pipeline of unknown size (PNG decoded without a resize) failed after some
    steps with "Incompatible shapes: [8,145,32] vs. [1,65,32]"; now the first 48 px batch says what to do."""
    import keras_vit
    from keras_vit import training

    rng = np.random.default_rng(0)
    images = [rng.uniform(-1, 1, (side, side, 3)).astype("float32") for side in [32] * 16 + [48] * 8]
    ds = tf.data.Dataset.from_generator(lambda: ((x, 0) for x in images), output_signature=(
        tf.TensorSpec((None, None, 3), tf.float32), tf.TensorSpec((), tf.int32))).batch(8)
    assert ds.element_spec[0].shape.as_list() == [None, None, None, 3]
    model = keras_vit.VisionTransformer(**{**tiny_config, "input_shape": (32, 32, 3)})
    training.compile_model(model, total_steps=3, jit_compile=False)
    steps = []
    callback = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: steps.append(batch))
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        model.fit(ds, epochs=1, verbose=0, callbacks=[callback])
    assert steps == [0, 1]  # the two 32 px batches trained; the first 48 px batch stopped it
    message = str(error.value)
    assert "This model was built for 32x32 images (input_shape=(32, 32, C)) and got a batch of another size" in message
    assert "[48 48]" in message and "Resize the images in the pipeline" in message
    assert "input_shape=(None, None, C)" in message and "Incompatible shapes" not in message


def test_a_known_size_other_than_the_built_one_is_refused_when_traced():
    patches = Patches(4)
    patches.build((None, 8, 8, 3))
    with pytest.raises(ValueError, match=r"built for 8x8 images .* got a batch of 12x8 \(height x width\)\. Resize"):
        patches(np.zeros((1, 12, 8, 3), "float32"))
    assert patches(np.zeros((2, 8, 8, 3), "float32")).shape == (2, 4, 48)
