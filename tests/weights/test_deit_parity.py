"""DeiT's distilled ViT (distillation token, two heads) against Hugging Face's `DeiTForImageClassificationWithTeacher`.

The judge is transformers' PyTorch implementation with random weights: its file in Hugging Face's names, and
the same weights renamed into timm's `VisionTransformerDistilled` names (tests/weights/torch_layouts.py), load
into `keras_vit.VisionTransformer(..., distillation_token=True)`, whose averaged output and whose two heads'
logits must equal Hugging Face's `logits`, `cls_logits` and `distillation_logits`.
"""

import keras
import numpy as np
import pytest
import safetensors.torch as safetensors_torch
import torch
import transformers

import keras_vit
from keras_vit.distillation import Distiller
from keras_vit.weights import CheckpointError, infer_config, load_pretrained, save_checkpoint
from tests.weights import torch_layouts

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def _images(shape, seed=7):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def _tiny(input_shape=(16, 16, 3), classes=5, **kwargs):
    return keras_vit.VisionTransformer(**TINY, input_shape=input_shape, classes=classes, classifier_activation=None,
                                       **kwargs)


@pytest.fixture(scope="module")
def deit(tmp_path_factory):
    torch.manual_seed(0)
    config = transformers.DeiTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                     image_size=16, patch_size=4, num_labels=5, layer_norm_eps=1e-6, hidden_act="gelu")
    model = transformers.DeiTForImageClassificationWithTeacher(config).eval()
    with torch.no_grad():  # HF initialises biases and LayerNorms to constants: randomise everything
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    assert "deit.embeddings.distillation_token" in state and "distillation_classifier.weight" in state
    folder = tmp_path_factory.mktemp("deit")
    files = {"huggingface": folder / "hf.safetensors", "timm": folder / "timm.safetensors"}
    safetensors_torch.save_file(state, str(files["huggingface"]))
    safetensors_torch.save_file(torch_layouts.timm_deit_names(state, 2), str(files["timm"]))
    x = _images((3, 16, 16, 3))
    with torch.no_grad():
        out = model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)))
    return files, x, {k: getattr(out, k).numpy() for k in ("logits", "cls_logits", "distillation_logits")}


@pytest.mark.parametrize("layout", ["huggingface", "timm"])
def test_distilled_checkpoints_give_hugging_face_logits(deit, layout):
    files, x, theirs = deit
    ours = _tiny(distillation_token=True)
    report = load_pretrained(ours, str(files[layout]))
    assert report.layout == layout and report.head == "loaded"
    assert {"dist", "head_dist/kernel", "head_dist/bias"} <= set(report.loaded)
    assert np.abs(theirs["logits"]).max() > 1e-2  # a real signal
    np.testing.assert_allclose(ours.predict(x, verbose=0), theirs["logits"], atol=1e-4, rtol=0)
    both = keras.ops.convert_to_numpy(Distiller(ours, _linear_teacher())(x))  # the two heads apart, as trained
    np.testing.assert_allclose(both[:, 0], theirs["cls_logits"], atol=1e-4, rtol=0)
    np.testing.assert_allclose(both[:, 1], theirs["distillation_logits"], atol=1e-4, rtol=0)


def _linear_teacher(classes=5, shape=(16, 16, 3)):
    return keras.Sequential([keras.Input(shape), keras.layers.Flatten(), keras.layers.Dense(classes)])


def test_a_distilled_file_and_a_plain_model_are_refused_both_ways(deit, hf_plain):
    files, _, _ = deit
    with pytest.raises(CheckpointError, match=r"has distillation token .*distillation_token=False; build it with "
                                              r"distillation_token=True"):
        load_pretrained(_tiny(), str(files["timm"]))
    with pytest.raises(CheckpointError, match=r"has no distillation token .*distillation_token=True"):
        load_pretrained(_tiny(distillation_token=True), str(hf_plain))


@pytest.fixture(scope="module")
def hf_plain(tmp_path_factory):
    torch.manual_seed(1)
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                                    image_size=16, patch_size=4, num_labels=5, layer_norm_eps=1e-6)
    model = transformers.ViTForImageClassification(config)
    path = tmp_path_factory.mktemp("vit") / "vit.safetensors"
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def test_save_checkpoint_round_trip_and_config_of_a_distilled_model(deit, tmp_path):
    files, x, theirs = deit
    ours = _tiny(distillation_token=True)
    load_pretrained(ours, str(files["huggingface"]))
    path = save_checkpoint(ours, tmp_path / "deit.npz")
    config = infer_config(dict(np.load(path)))
    assert config["distillation_token"] is True and config["class_token"] is True
    assert (config["image_size"], config["classes"], config["hidden_size"]) == (16, 5, 32)
    again = _tiny(distillation_token=True)
    load_pretrained(again, str(path))
    np.testing.assert_allclose(again.predict(x, verbose=0), theirs["logits"], atol=1e-4, rtol=0)


def test_resampling_keeps_the_class_and_distillation_rows(deit):
    files, _, _ = deit
    ours = _tiny(input_shape=(24, 24, 3), distillation_token=True)
    report = load_pretrained(ours, str(files["huggingface"]))
    assert report.resampled == ((4, 4), (6, 6))
    assert any("class and distillation token rows kept" in m for m in report.messages)
    table = np.asarray(ours.get_layer("patch_encoder").position_embedding)
    hf_table = safetensors_torch.load_file(str(files["huggingface"]))["deit.embeddings.position_embeddings"].numpy()
    assert table.shape == (1, 2 + 36, 32)
    np.testing.assert_array_equal(table[0, :2], hf_table[0, :2])


def test_a_new_number_of_classes_zeroes_both_heads(deit):
    files, x, _ = deit
    ours = _tiny(classes=3, distillation_token=True)
    report = load_pretrained(ours, str(files["timm"]))
    assert report.head == "reset"
    head = ours.get_layer("predictions")
    for weight in (head.kernel, head.bias, head.distillation_kernel, head.distillation_bias):
        assert not np.any(np.asarray(weight))
