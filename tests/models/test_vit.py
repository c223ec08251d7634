import copy
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import VisionTransformer
from keras_vit.layers import TransformerBlock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_layer_names_are_the_contract(tiny_config):
    model = VisionTransformer(representation_size=16, **tiny_config)
    names = [layer.name for layer in model.layers]
    assert names == [
        "images",
        "patches",
        "patch_encoder",
        "transformer_block_0",
        "transformer_block_1",
        "encoder_norm",
        "pooling",
        "pre_logits",
        "predictions",
    ]
    assert model.get_layer("encoder_norm").epsilon == 1e-6


def test_head_is_zero_initialised_and_outputs_float32(tiny_config):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    head = model.get_layer("predictions")
    assert not np.any(head.kernel.numpy()) and not np.any(head.bias.numpy())
    out = model.predict(np.random.default_rng(0).uniform(-1, 1, (3, 16, 16, 3)), verbose=0)
    assert out.shape == (3, 5) and out.dtype == np.float32
    np.testing.assert_array_equal(out, 0.0)


def test_forward_equals_composition_of_layers(tiny_config):
    """The functional graph is exactly patches -> encoder -> blocks -> norm -> token -> head."""
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    rng = np.random.default_rng(1)
    for w in model.weights:
        w.assign(rng.normal(scale=0.2, size=w.shape).astype("float32"))
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    z = model.get_layer("patch_encoder")(model.get_layer("patches")(x))
    for i in range(2):
        z = model.get_layer(f"transformer_block_{i}")(z)
    z = model.get_layer("encoder_norm")(z)[:, 0]
    expected = keras.ops.convert_to_numpy(model.get_layer("predictions")(z))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), expected, atol=1e-5)


def test_gap_classifier_without_class_token(tiny_config):
    model = VisionTransformer(classifier="gap", **tiny_config)
    assert model.get_layer("patch_encoder").class_token is False
    assert model.get_layer("pooling").mode == "avg"
    token = VisionTransformer(**tiny_config)
    assert token.count_params() - model.count_params() == 2 * tiny_config["hidden_size"]


@pytest.mark.parametrize(
    "pooling,shape", [(None, (None, 17, 32)), ("token", (None, 32)), ("avg", (None, 32)), ("max", (None, 32))]
)
def test_include_top_false_and_pooling(tiny_config, pooling, shape):
    tiny_config.pop("classes")
    model = VisionTransformer(include_top=False, pooling=pooling, **tiny_config)
    assert model.output_shape == shape
    assert "predictions" not in [layer.name for layer in model.layers]


def test_rectangular_images(tiny_config):
    tiny_config["input_shape"] = (8, 24, 1)
    model = VisionTransformer(**tiny_config)
    assert model.get_layer("patch_encoder").position_embedding.shape == (1, 13, 32)
    assert model.predict(np.zeros((2, 8, 24, 1)), verbose=0).shape == (2, 5)


def test_input_tensor(tiny_config):
    shape = tiny_config.pop("input_shape")
    inputs = keras.Input(shape, name="my_images")
    model = VisionTransformer(input_tensor=inputs, **tiny_config)
    assert model.inputs[0] is inputs
    model2 = VisionTransformer(input_tensor=keras.Input((16, 16, 3)), input_shape=(16, 16, 3), **tiny_config)
    assert model2.input_shape == (None, 16, 16, 3)


def test_two_batch_sizes_and_softmax(tiny_config):
    model = VisionTransformer(**tiny_config)
    for batch in (1, 4):
        out = model.predict(np.zeros((batch, 16, 16, 3)), verbose=0)
        np.testing.assert_allclose(out.sum(-1), 1.0, rtol=1e-6)
        np.testing.assert_allclose(out, 1 / 5, rtol=1e-6)  # zero head: uniform


def _fill_distinct(model, seed):
    """Gives every variable its own values from one seeded stream: no two variables alike.

    Re-seeding per variable would give all weights of one shape the same values (query = key =
    value, block 0 = block 1), and a round trip that swapped them would still pass.
    """
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(scale=0.2, size=w.shape).astype("float32"))
    values = [w.numpy().tobytes() for w in model.weights]
    assert len(set(values)) == len(values)


def snapshot(model, x):
    """{"weight:<path>": value} for every variable and {"output:<layer>": value} for every layer (inference)."""
    layers = model.layers[1:]
    outputs = keras.Model(model.inputs, [layer.output for layer in layers]).predict(x, verbose=0)
    return {
        **{f"weight:{w.path}": w.numpy() for w in model.weights},
        **{f"output:{layer.name}": out for layer, out in zip(layers, outputs)},
    }


def _assert_same_snapshot(got, expected):
    """Every weight and every layer's output equal, bit for bit."""
    assert sorted(got) == sorted(expected)
    for key, value in got.items():
        np.testing.assert_array_equal(value, expected[key], err_msg=key)


def _swap(first, second):
    a, b = first.numpy(), second.numpy()
    first.assign(b)
    second.assign(a)


def test_weights_file_round_trip(tiny_config, tmp_path):
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    _fill_distinct(model, 2)
    path = str(tmp_path / "tiny.weights.h5")
    model.save_weights(path)
    loaded = VisionTransformer(weights=path, classifier_activation=None, **tiny_config)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 16, 16, 3))
    _assert_same_snapshot(snapshot(loaded, x), snapshot(model, x))


def test_round_trip_check_catches_swapped_weights(tiny_config):
    """The fill and comparison above see a load that swapped two blocks, or query and key."""
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    _fill_distinct(model, 2)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 16, 16, 3))
    logits = model.predict(x, verbose=0)
    blocks = [model.get_layer(f"transformer_block_{i}") for i in range(2)]
    for first, second in zip(blocks[0].weights, blocks[1].weights):
        _swap(first, second)
    swapped_blocks = model.predict(x, verbose=0)
    assert np.abs(swapped_blocks - logits).max() > 1e-3
    for first, second in zip(blocks[0].weights, blocks[1].weights):
        _swap(first, second)
    np.testing.assert_array_equal(model.predict(x, verbose=0), logits)
    attention = blocks[0].attention
    _swap(attention.query_dense.kernel, attention.key_dense.kernel)
    assert np.abs(model.predict(x, verbose=0) - logits).max() > 1e-3
    # The old fill (one seed per variable) made such swaps invisible: same-shape weights were equal.
    for w in model.weights:
        w.assign(np.random.default_rng(2).normal(size=w.shape).astype("float32"))
    before = model.predict(x, verbose=0)
    for first, second in zip(blocks[0].weights, blocks[1].weights):
        _swap(first, second)
    np.testing.assert_array_equal(model.predict(x, verbose=0), before)


def test_stochastic_depth_grows_linearly(tiny_config):
    tiny_config["num_layers"] = 3
    model = VisionTransformer(stochastic_depth_rate=0.2, **tiny_config)
    rates = [model.get_layer(f"transformer_block_{i}").stochastic_depth_rate for i in range(3)]
    assert rates == pytest.approx([0.0, 0.1, 0.2])


BAD = [
    ({"patch_size": 0}, r"`patch_size` must be a positive int. Received: patch_size=0"),
    ({"patch_size": 32}, r"`patch_size` must not exceed the image size. Received: patch_size=32"),
    ({"patch_size": 3}, r"multiples of `patch_size`. Received: input_shape=\(16, 16, 3\), patch_size=3"),
    ({"input_shape": (16, 18, 3)}, r"multiples of `patch_size`. Received: input_shape=\(16, 18, 3\)"),
    ({"hidden_size": 30}, r"`hidden_size` must be divisible by `num_heads`. Received: hidden_size=30, num_heads=4"),
    ({"classifier": "cls"}, r"`classifier` must be one of 'token', 'gap'. Received: classifier='cls'"),
    ({"pooling": "mean", "include_top": False}, r"`pooling` must be one of None, 'token', 'avg', 'max'. Received: pooling='mean'"),
    ({"class_token": False}, r"`classifier='token'` needs a class token. Received: class_token=False"),
    ({"classifier": "gap", "pooling": "token"}, r"`pooling='token'` needs a class token"),
    ({"classifier_activation": "softmx"}, r"`classifier_activation` must be None, a callable or the name of a Keras activation .* Received: classifier_activation='softmx'"),
    ({"dropout_rate": -0.1}, r"`dropout_rate` must be a float in \[0, 1\). Received: dropout_rate=-0.1"),
    ({"attention_dropout_rate": 1.0}, r"Received: attention_dropout_rate=1.0"),
    ({"stochastic_depth_rate": 2}, r"Received: stochastic_depth_rate=2"),
    ({"classes": 0}, r"`classes` must be a positive int. Received: classes=0"),
    ({"representation_size": -3}, r"Received: representation_size=-3"),
    ({"weights": "imagenet"}, r"weights='imagenet' needs one of the variant configurations \(ViTTi16, "),
    ({"weights": "augreg/B_16-i21k"}, r"Checkpoint 'augreg/B_16-i21k' is a ViTB16 checkpoint; the model is not a published variant"),
    ({"weights": "missing.weights.h5"}, r"path of an existing .weights.h5, .npz or .safetensors file"),
    ({"weights": "imagenet22k"}, r"`weights` must be None, 'imagenet', 'imagenet21k', a name from .* Received: weights='imagenet22k'"),
    ({"input_shape": (16, 16)}, r"`input_shape` must be a \(height, width, channels\) tuple of positive ints"),
    ({"input_shape": (None, None, None)}, r"`input_shape` must be a \(height, width, channels\) tuple .* Received: input_shape=\(None, None, None\)"),
    ({"input_shape": (None, 18, 3)}, r"Image height and width must be multiples of `patch_size`"),
    ({"position_embedding": "rope"}, r"`position_embedding` must be one of .* Received: position_embedding='rope'"),
    ({"position_embedding_interpolation": "nearest"}, r"Received: position_embedding_interpolation='nearest'"),
    ({"position_embedding_grid": (4, 0)}, r"`position_embedding_grid` must be None or \(rows, cols\)"),
    ({"position_embedding_grid": (5, 5)}, r"`position_embedding_grid` of a fixed-size model must be its patch grid"),
    ({"input_tensor": keras.Input((16, 16, 1))}, r"`input_tensor` and `input_shape` disagree"),
    ({"input_tensor": np.zeros((2, 16, 16, 3))}, r"`input_tensor` must be a Keras tensor .* Received: input_tensor of type ndarray"),
    ({"input_tensor": keras.Input((16, 16)), "input_shape": None}, r"`input_tensor` must have shape \(batch, height, width, channels\)"),
    ({"weights": np.zeros(3)}, r"`weights` must be None, 'imagenet', 'imagenet21k'"),
    ({"patch_size": 4.0}, r"`patch_size` must be a positive int. Received: patch_size=4.0"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[m[:40] for _, m in BAD])
def test_bad_arguments_raise_before_building(tiny_config, override, message, monkeypatch):
    built = []
    monkeypatch.setattr(TransformerBlock, "build", lambda self, shape: built.append(shape))
    with pytest.raises(ValueError, match=message):
        VisionTransformer(**{**tiny_config, **override})
    assert not built


def test_numpy_integers_are_accepted(tiny_config):
    config = {**tiny_config, "patch_size": np.int64(4), "classes": np.int32(5), "input_shape": np.array([16, 16, 3])}
    model = VisionTransformer(**config)
    assert model.input_shape == (None, 16, 16, 3) and model.output_shape == (None, 5)
    assert type(model.get_layer("patches").get_config()["patch_size"]) is int


def test_weights_file_that_is_not_hdf5(tiny_config, tmp_path):
    path = tmp_path / "bad.weights.h5"
    path.write_text("not an HDF5 file")
    with pytest.raises(ValueError, match=r"`weights` file could not be loaded into 'vision_transformer'"):
        VisionTransformer(weights=str(path), **tiny_config)


def test_channel_mismatch_at_call_names_expected_value(tiny_config):
    model = VisionTransformer(**tiny_config)
    with pytest.raises(ValueError, match=r"expected axis -1 of input shape to have value 3"):
        model.predict(np.zeros((1, 16, 16, 1)), verbose=0)


@pytest.mark.parametrize("name", ["mixed_bfloat16", pytest.param("mixed_float16", marks=pytest.mark.float16_matmul)])
def test_mixed_precision_predicts_and_trains(policy, tiny_config, name):
    policy(name)
    model = VisionTransformer(classifier_activation=None, **tiny_config)
    assert all(w.dtype == "float32" for w in model.weights)
    x = np.random.default_rng(4).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = np.arange(8) % 5
    assert model.predict(x, verbose=0).dtype == np.float32
    assert model.get_layer("transformer_block_0").compute_dtype == name.split("_")[1]
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, epochs=3, batch_size=8, verbose=0)
    assert all(np.isfinite(history.history["loss"]))
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_get_config_round_trip(tiny_config):
    model = VisionTransformer(representation_size=8, classifier="gap", **tiny_config)
    config = model.get_config()
    clone = keras.Model.from_config(copy.deepcopy(config))
    assert json.dumps(clone.get_config(), sort_keys=True) == json.dumps(config, sort_keys=True)


def test_keras_file_round_trip_in_fresh_process(tiny_config, tmp_path):
    model = VisionTransformer(representation_size=8, dropout_rate=0.1, stochastic_depth_rate=0.1, **tiny_config)
    _fill_distinct(model, 5)
    x = np.random.default_rng(6).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    model.save(tmp_path / "model.keras")
    script = textwrap.dedent(
        f"""
        import sys
        import numpy as np, keras, keras_vit
        sys.path.insert(0, {ROOT!r})
        from tests.models.test_vit import snapshot
        model = keras.saving.load_model({str(tmp_path / 'model.keras')!r})
        np.savez({str(tmp_path / 'loaded.npz')!r}, **snapshot(model, np.load({str(tmp_path / 'x.npy')!r})))
        """
    )
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    with np.load(tmp_path / "loaded.npz") as loaded:
        _assert_same_snapshot(dict(loaded), snapshot(model, x))


@pytest.mark.parametrize("block_size", [None, 8])
def test_int4_of_any_block_size_saves_and_reloads(tiny_config, tmp_path, block_size):
    """Issue 29, item 4: the sublayers inside PatchEncoder and TransformerBlock were quantised again on load with
    Keras' default block size (128): "expected 5 variables, but received 3" for None (per channel; -1 is the same
    policy, "int4/-1"), a kernel_scale shape mismatch for 8. Every block size reloads with the quantised model's
    outputs, on every backend (the default, 128, in tests/backend_worker.py)."""
    model = VisionTransformer(**tiny_config)
    head = model.get_layer("predictions")
    head.kernel.assign(np.random.default_rng(0).normal(size=head.kernel.shape).astype("float32"))
    model.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=block_size))
    policy = f"int4/{-1 if block_size is None else block_size}_from_float32"
    assert model.get_layer("patch_encoder").projection.dtype_policy.name == policy
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = keras.ops.convert_to_numpy(model(x))
    model.save(tmp_path / "q.keras")
    loaded = keras.saving.load_model(tmp_path / "q.keras")
    assert loaded.get_layer("patch_encoder").projection.dtype_policy.name == policy
    assert loaded.get_layer("transformer_block_0").mlp_dense_1.dtype_policy.name == policy
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), expected, atol=1e-6)


class _Wrapper(keras.Model):
    """A user's subclassed model around a ViT (issue 29): its output shape is inferred by tracing `call`."""

    def __init__(self, inner, **kwargs):
        super().__init__(**kwargs)
        self.inner = inner

    def call(self, x):
        return self.inner(x)


def test_an_any_resolution_vit_inside_a_subclassed_model_builds_on_every_backend(tiny_config):
    """Issue 29, item 2: on PyTorch Keras infers the output on a stand-in of side 83, which ImageSizeCheck refused as
    an image; on JAX Patches' reshape could not follow the symbolic size. TensorFlow built it."""
    vit = VisionTransformer(**{**tiny_config, "input_shape": (None, None, 3)})
    model = keras.Sequential([keras.Input((None, None, 3)), _Wrapper(vit)])
    assert model.output_shape == (None, tiny_config["classes"])
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 24, 3)).astype("float32")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), keras.ops.convert_to_numpy(vit(x)), atol=1e-6)
    with pytest.raises(ValueError, match=r"Image height must be a multiple of patch_size=4"):
        model(x[:, :15])  # real images of a wrong size are still refused
