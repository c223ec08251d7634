"""Exact parameter counts of every variant, pinned (224 px, 1000 classes, no representation layer)."""

import gc

import pytest

import keras_vit
from keras_vit.models import SIZES, VARIANTS

# From the reference implementation's configs (google-research/vision_transformer) and
# timm/keras-hub (docs/weights.md lists the checkpoints). Paper Table 1: B 86M, L 307M, H 632M.
PINNED = {
    "ViTTi16": 5_717_416,
    "ViTS16": 22_050_664,
    "ViTS32": 22_878_952,
    "ViTB8": 86_576_872,
    "ViTB16": 86_567_656,
    "ViTB32": 88_224_232,
    "ViTL16": 304_326_632,
    "ViTL32": 306_535_400,
    "ViTH14": 632_045_800,
}
LIGHT = ["ViTTi16", "ViTS16", "ViTS32", "ViTB16"]


def test_every_variant_has_a_pinned_count():
    assert set(VARIANTS) == set(PINNED)
    assert all(hasattr(keras_vit, name) for name in VARIANTS)


@pytest.fixture(autouse=True)
def _free_the_model():
    """A built model lives in reference cycles: collect it before the next is built (ViT-H/14 alone holds 2.5 GB;
    with the large variants alive together the process grew by 5.8 GB in this module)."""
    yield
    gc.collect()


def _check(name):
    model = getattr(keras_vit, name)()
    size, patch = VARIANTS[name]
    hidden = SIZES[size][0]
    assert model.count_params() == PINNED[name]
    assert model.input_shape == (None, 224, 224, 3)
    assert model.output_shape == (None, 1000)
    seq_len = (224 // patch) ** 2 + 1
    assert model.get_layer("patch_encoder").position_embedding.shape == (1, seq_len, hidden)
    assert len([layer for layer in model.layers if layer.name.startswith("transformer_block_")]) == SIZES[size][1]


@pytest.mark.parametrize("name", LIGHT)
def test_parameter_count(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.backend_independent  # building ViT-H/14 takes 28 s on JAX; the light variants check every backend
@pytest.mark.parametrize("name", sorted(set(PINNED) - set(LIGHT)))
def test_parameter_count_large(name):
    _check(name)


def test_b16_gap_without_class_token():
    assert keras_vit.ViTB16(classifier="gap").count_params() == 86_566_120


def test_b16_backbone():
    model = keras_vit.ViTB16(include_top=False)
    assert model.count_params() == 85_798_656
    assert model.output_shape == (None, 197, 768)


def test_builders_are_documented_and_fix_the_table():
    assert keras_vit.ViTL16.__name__ == "ViTL16"
    assert "hidden_size 1024, 24 layers, 16 heads, mlp_dim 4096" in keras_vit.ViTL16.__doc__
    with pytest.raises(ValueError, match=r"ViTB16 fixes patch_size, .*Received: hidden_size=10"):
        keras_vit.ViTB16(hidden_size=10)


def test_builder_keras_applications_arguments():
    model = keras_vit.ViTTi16(input_shape=(32, 32, 3), classes=7, classifier_activation=None, name="ti")
    assert model.name == "ti" and model.output_shape == (None, 7)
    assert model.get_layer("predictions").activation is __import__("keras").activations.linear
    pooled = keras_vit.ViTS32(include_top=False, pooling="avg", input_shape=(64, 96, 3))
    assert pooled.output_shape == (None, 384)
    assert keras_vit.ViTB16().name == "vit_b16"
