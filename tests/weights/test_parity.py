"""keras_vit with loaded weights against independent implementations (issue 4, "Proof of equivalence").

Judges: a NumPy forward pass from the paper's equations (tests/weights/reference.py),
the vit-keras package's own `.npz` loader (for files in Google's layout, and for
the files `save_checkpoint` writes), and Hugging Face transformers'
ViTForImageClassification (PyTorch).
"""

import contextlib
import warnings

import numpy as np
import pytest
import safetensors.torch as safetensors_torch
import torch
import transformers
import vit_keras.utils as vit_keras_utils
import vit_keras.vit as vit_keras

import keras_vit
from keras_vit.weights import load_pretrained, save_checkpoint
from tests.weights import reference, torch_layouts

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def _images(shape, seed=7):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _tiny(input_shape=(16, 16, 3), classes=5, **kwargs):
    return keras_vit.VisionTransformer(
        **TINY, input_shape=input_shape, classes=classes, classifier_activation=None, **kwargs
    )


@pytest.mark.parametrize("representation", [None, 24])
def test_numpy_reference_forward_agrees(tmp_path, representation):
    arrays = reference.google_checkpoint(0, representation=representation)
    path = tmp_path / "ckpt.npz"
    np.savez(path, **arrays)
    model = _tiny(representation_size=representation)
    report = load_pretrained(model, str(path))
    assert report.head == "loaded" and report.resampled is None
    x = _images((3, 16, 16, 3))
    expected = reference.forward(arrays, x, layers=2)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------- vit-keras


def _vit_keras_model(path, image_size, patch=16, classes=5, representation_size=None):
    """vit-keras' ViT with a file read by vit-keras' own loader of Google's `.npz` checkpoints (224 px files)."""
    model = vit_keras.build_model(
        image_size=image_size, patch_size=patch, num_layers=2, hidden_size=32, num_heads=4, name="vk",
        mlp_dim=64, classes=classes, dropout=0.0, activation="linear", include_top=True,
        representation_size=representation_size,
    )
    h, w = image_size if isinstance(image_size, tuple) else (image_size, image_size)
    # vit-keras warns when it resizes the position embeddings, leaves an array of the file unused or a weight unset
    with pytest.warns(UserWarning, match="Resizing position embeddings") if (h, w) != (224, 224) else _no_warnings():
        vit_keras_utils.load_weights_numpy(model, str(path), pretrained_top=True,
                                           num_x_patches=w // patch, num_y_patches=h // patch)
    return model


@contextlib.contextmanager
def _no_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


@pytest.fixture(scope="module")
def google_224(tmp_path_factory):
    """A ViT in Google's layout, patch 16 at 224 px (a 14x14 grid), width 32, random values."""
    arrays = reference.google_checkpoint(1, patch=16, grid=(14, 14))
    path = tmp_path_factory.mktemp("vk") / "ViT-tiny_16.npz"
    np.savez(path, **arrays)
    return path, arrays


def _kv(input_shape, **kwargs):
    return keras_vit.VisionTransformer(patch_size=16, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                                       input_shape=input_shape, classes=5, classifier_activation=None, **kwargs)


@pytest.mark.tensorflow_only  # vit-keras' load_weights_numpy converts Keras variables with NumPy 2's copy=False, which JAX arrays refuse
def test_vit_keras_loader_agrees_at_the_checkpoint_resolution(google_224):
    path, _ = google_224
    theirs = _vit_keras_model(path, 224)
    ours = _kv((224, 224, 3))
    load_pretrained(ours, str(path))
    x = _images((2, 224, 224, 3))
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0), atol=1e-4, rtol=0)


@pytest.mark.parametrize("size", [384, (384, 224)], ids=["384", "384x224"])
def test_resampled_position_embeddings_equal_vit_keras(google_224, size, caplog):
    path, arrays = google_224
    h, w = (size, size) if isinstance(size, int) else size
    theirs = _vit_keras_model(path, size)
    ours = _kv((h, w, 3))
    with caplog.at_level("WARNING", logger="keras_vit.weights"):
        report = load_pretrained(ours, str(path))
    assert report.resampled == ((14, 14), (h // 16, w // 16))
    resample_messages = [r for r in caplog.records if "Resampled position embeddings" in r.getMessage()]
    assert len(resample_messages) == 1
    their_pe = theirs.get_layer("Transformer_posembed_input").get_weights()[0]
    our_pe = ours.get_layer("patch_encoder").position_embedding.numpy()
    assert our_pe.shape == (1, 1 + (h // 16) * (w // 16), 32)
    np.testing.assert_array_equal(our_pe[:, 0], arrays["Transformer/posembed_input/pos_embedding"][:, 0])
    np.testing.assert_allclose(our_pe, their_pe, atol=1e-6, rtol=0)
    x = _images((1, h, w, 3))
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs.predict(x, verbose=0), atol=1e-4, rtol=0)


@pytest.mark.tensorflow_only  # vit-keras' load_weights_numpy converts Keras variables with NumPy 2's copy=False, which JAX arrays refuse
@pytest.mark.parametrize("representation", [None, 24])
def test_save_checkpoint_file_gives_keras_vit_logits_in_vit_keras(tmp_path, representation):
    """`save_checkpoint` is read by vit-keras' loader of Google's files, code keras_vit does not share."""
    ours = _kv((224, 224, 3), representation_size=representation)
    rng = np.random.default_rng(5)
    for v in ours.weights:  # every weight its own values, the (zero-initialised) head too
        v.assign(rng.normal(0.0, 1.0 if "predictions" in v.path else 0.2, v.shape).astype("float32"))
    path = save_checkpoint(ours, tmp_path / "finetuned.npz")
    theirs = _vit_keras_model(path, 224, representation_size=representation)  # every array used, every weight set
    x = _images((2, 224, 224, 3))
    expected = ours.predict(x, verbose=0)
    assert np.abs(expected).max() > 0.5  # a real signal
    # measured: 4.8e-7 (logits up to 1)
    np.testing.assert_allclose(theirs.predict(x, verbose=0), expected, atol=5e-6, rtol=0)


def test_no_message_when_grids_match(google_224, caplog):
    path, _ = google_224
    with caplog.at_level("WARNING", logger="keras_vit.weights"):
        report = load_pretrained(_kv((224, 224, 3)), str(path))
    assert report.messages == [] and not caplog.records


# ----------------------------------------------------------------------------- Hugging Face / timm


def _hf_model(hidden, layers, heads, mlp, image, patch, classes, seed):
    torch.manual_seed(seed)
    config = transformers.ViTConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
        image_size=image, patch_size=patch, num_labels=classes, layer_norm_eps=1e-6, hidden_act="gelu",
    )
    model = transformers.ViTForImageClassification(config).eval()
    with torch.no_grad():  # HF initialises biases and LayerNorms to constants: randomise everything
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def _hf_logits(model, x):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2))).logits.numpy()


@pytest.fixture(scope="module")
def hf_tiny(tmp_path_factory):
    model = _hf_model(32, 2, 4, 64, image=16, patch=4, classes=5, seed=0)
    folder = tmp_path_factory.mktemp("hf")
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    assert "vit.layers.0.attention.q_proj.weight" in state  # the transformers 5.x names
    files = {}
    for name, tensors in (("hf5", state), ("hf4", torch_layouts.old_hf_names(state)), ("timm", torch_layouts.timm_names(state, 2))):
        files[name] = folder / f"{name}.safetensors"
        safetensors_torch.save_file(tensors, str(files[name]))
    return model, files


@pytest.mark.parametrize("layout", ["hf5", "hf4", "timm"])
def test_hugging_face_and_timm_files_give_hugging_face_logits(hf_tiny, layout):
    hf, files = hf_tiny
    ours = _tiny()
    report = load_pretrained(ours, str(files[layout]))
    assert report.layout == ("timm" if layout == "timm" else "huggingface")
    assert report.head == "loaded"
    x = _images((3, 16, 16, 3))
    np.testing.assert_allclose(ours.predict(x, verbose=0), _hf_logits(hf, x), atol=1e-4, rtol=0)


def test_vit_ti16_hugging_face_weights_give_hugging_face_logits(tmp_path):
    hf = _hf_model(192, 12, 3, 768, image=224, patch=16, classes=1000, seed=1)
    with torch.no_grad():  # keep activations in a sane range through 12 blocks
        for name, p in hf.named_parameters():
            if "weight" in name and p.ndim > 1:
                p.normal_(0.0, 0.02)
    path = tmp_path / "vit_ti16.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in hf.state_dict().items()}, str(path))
    ours = keras_vit.ViTTi16(weights=str(path), classifier_activation=None)
    x = _images((2, 224, 224, 3))
    theirs = _hf_logits(hf, x)
    assert np.abs(theirs).max() > 1e-2  # a real signal, not all zeros
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs, atol=1e-4, rtol=0)
