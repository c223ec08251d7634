"""`weights=` reaches keras_vit.weights through the hook it registers (models never imports weights)."""

import pytest

import keras_vit
from keras_vit.models import checkpoint_hook
from keras_vit.weights import builder_weights, load_pretrained


def test_import_keras_vit_registers_the_weights_loader():
    assert checkpoint_hook.loader("load") is load_pretrained
    assert checkpoint_hook.loader("is_name") is builder_weights.is_name
    assert checkpoint_hook.loader("is_name")("original/B_16-i21k+i1k-384")
    assert not checkpoint_hook.loader("is_name")("no-such-checkpoint")


def test_a_name_without_the_loader_says_what_to_import(monkeypatch):
    monkeypatch.setattr(checkpoint_hook, "_LOADER", {})
    with pytest.raises(RuntimeError, match="import keras_vit"):
        keras_vit.VisionTransformer(patch_size=4, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=8,
                                    input_shape=(8, 8, 3), weights="original/B_16-i21k+i1k-384")
