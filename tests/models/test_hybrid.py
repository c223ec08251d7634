"""The hybrid ResNet+ViT (paper Sec. 3.1 "Hybrid Architecture") and its StdConv2D layer."""

import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import training
from keras_vit.layers import StdConv2D
from keras_vit.models import HYBRID_VARIANTS, SIZES
from tests.conftest import XLA_BY_DEFAULT

# Exact counts at 224 px with a 1000-class head (issue 5; the reference configurations of
# google-research/vision_transformer: R26 (2, 2, 2, 2) + S/32, R50 (3, 4, 9) + B/16, R50 (3, 4, 6, 3) + L/32).
PINNED = {"ViTR26S32": 36_431_912, "ViTR50B16": 98_659_112, "ViTR50L32": 328_994_856}
TINY = dict(patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, resnet_num_layers=(1, 1))


def _check(name):
    model = getattr(keras_vit, name)()
    size, stages = HYBRID_VARIANTS[name]
    stride = 16 if len(stages) == 3 else 32
    assert model.count_params() == PINNED[name]
    assert model.input_shape == (None, 224, 224, 3) and model.output_shape == (None, 1000)
    assert model.get_layer("patches").input.shape == (None, 224 // stride, 224 // stride, 256 * 2 ** (len(stages) - 1))
    assert model.get_layer("patch_encoder").position_embedding.shape == (1, (224 // stride) ** 2 + 1, SIZES[size][0])
    assert sum(1 for layer in model.layers if layer.name.endswith("_conv1")) == sum(stages)


def test_every_hybrid_has_a_pinned_count():
    assert set(HYBRID_VARIANTS) == set(PINNED)


def test_r26_s32_parameter_count():
    _check("ViTR26S32")


@pytest.mark.slow
@pytest.mark.backend_independent  # test_r26_s32_parameter_count checks every backend
@pytest.mark.parametrize("name", ["ViTR50B16", "ViTR50L32"])
def test_parameter_count_large(name):
    _check(name)


def test_std_conv_standardises_each_filter():
    rng = np.random.default_rng(0)
    layer = StdConv2D(3, 3, padding="valid", use_bias=False, epsilon=1e-8)
    x = rng.standard_normal((1, 5, 5, 2)).astype("float32")
    layer.build(x.shape)
    w = rng.standard_normal((3, 3, 2, 3)).astype("float32") * 4 + 1
    layer.kernel.assign(w)
    flat = w.reshape(-1, 3)
    w_hat = ((flat - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-8)).reshape(w.shape)
    expected = np.einsum("ijc,ijco->o", x[0, :3, :3], w_hat)  # top-left output position, by hand
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer(x))[0, 0, 0], expected, rtol=1e-5, atol=1e-5)
    assert StdConv2D.from_config(layer.get_config()).epsilon == 1e-8
    with pytest.raises(ValueError, match="`epsilon` must be a positive number. Received: epsilon=0"):
        StdConv2D(3, 3, epsilon=0)


def test_tiny_hybrid_saves_loads_and_trains_with_xla(tmp_path):
    model = keras_vit.VisionTransformer(**TINY, input_shape=(32, 32, 3), classes=4, classifier_activation=None)
    x = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    y = np.arange(8) % 4
    training.compile_model(model, total_steps=4, learning_rate=1e-3)
    assert model.jit_compile is XLA_BY_DEFAULT
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert model.get_layer("predictions").kernel.numpy().any()  # trained
    path = tmp_path / "hybrid.keras"
    model.save(path)
    script = (
        "import sys, numpy as np, keras, keras_vit\n"
        f"m = keras.saving.load_model({str(path)!r})\n"
        "x = np.random.default_rng(0).uniform(-1, 1, (8, 32, 32, 3)).astype('float32')\n"
        "np.save(sys.argv[1], m.predict(x, verbose=0))\n"
    )
    out = tmp_path / "out.npy"
    subprocess.run([sys.executable, "-c", script, str(out)], check=True, timeout=300, capture_output=True)
    np.testing.assert_array_equal(np.load(out), model.predict(x, verbose=0))


BAD = [
    ({"resnet_num_layers": ()}, r"`resnet_num_layers` must be None or a non-empty tuple of positive ints"),
    ({"resnet_num_layers": (3, 0)}, r"Received: resnet_num_layers=\(3, 0\)"),
    ({"resnet_num_layers": "3,4,9"}, r"Received: resnet_num_layers='3,4,9'"),
    ({"resnet_width_factor": 0}, r"`resnet_width_factor` must be a positive int"),
    ({"input_shape": (36, 32, 3)}, r"multiples of the ResNet's output stride \(8\) x `patch_size`. Received: input_shape=\(36, 32, 3\)"),
    ({"patch_size": 8}, r"the ResNet's output stride \(8\) x `patch_size` must not exceed the image size"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_hybrid_arguments(override, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.VisionTransformer(**{**TINY, "input_shape": (32, 32, 3), **override})


def test_hybrid_builders_fix_their_table():
    with pytest.raises(ValueError, match="ViTR50B16 fixes .*resnet_num_layers.* Received: resnet_num_layers=\\(3, 4\\)"):
        keras_vit.ViTR50B16(resnet_num_layers=(3, 4))
    with pytest.raises(ValueError, match="multiples of the ResNet's output stride \\(32\\)"):
        keras_vit.ViTR26S32(input_shape=(240, 240, 3))
    with pytest.raises(ValueError, match="'augreg/B_16-i21k' is a ViTB16 checkpoint; the model is ViTR26S32"):
        keras_vit.ViTR26S32(weights="augreg/B_16-i21k")
