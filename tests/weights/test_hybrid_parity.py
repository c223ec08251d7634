"""The hybrid ResNet+ViT (paper Sec. 3.1) against Hugging Face transformers (issue 5, "Proof").

The ResNet part against `BitBackbone` (layer_type="bottleneck", weight-standardised
convolutions, GroupNorm, TF "SAME" padding); the whole hybrid against BitBackbone's
feature map fed to a Hugging Face ViT with 1x1 patches, which is the hybrid of the
reference code. All weights random; the file layouts are written by this test's own
renaming code, not keras_vit's.
"""

import keras
import numpy as np
import pytest
import safetensors.torch as safetensors_torch
import torch
import transformers

import keras_vit
from keras_vit.weights import load_pretrained
from tests.weights import torch_layouts

DEPTHS = (2, 1)  # two stages: output stride 8, 512 channels
IMAGE = 64


def _randomise(module, seed, scale=0.2):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or ".norm" in name and name.endswith("weight"):
                p.copy_(1.0 + scale * torch.randn_like(p))
            else:
                p.normal_(0.0, scale)


@pytest.fixture(scope="module")
def hf_hybrid():
    bit = transformers.BitBackbone(transformers.BitConfig(
        layer_type="bottleneck", global_padding="SAME", embedding_dynamic_padding=True, depths=list(DEPTHS),
        hidden_sizes=[256, 512], out_features=["stage2"], num_groups=32,
    )).eval()
    _randomise(bit, 0)
    grid = IMAGE // 8
    vit = transformers.ViTForImageClassification(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=grid,
        patch_size=1, num_channels=512, num_labels=5, layer_norm_eps=1e-6, hidden_act="gelu",
    )).eval()
    _randomise(vit, 1)
    return bit, vit


def _ours(**kwargs):
    return keras_vit.VisionTransformer(
        patch_size=1, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, input_shape=(IMAGE, IMAGE, 3),
        classes=5, classifier_activation=None, resnet_num_layers=DEPTHS, **kwargs
    )


def _x():
    return np.random.default_rng(2).uniform(-1, 1, (2, IMAGE, IMAGE, 3)).astype("float32")


def _hf_features_and_logits(bit, vit, x):
    with torch.no_grad():
        features = bit(torch.from_numpy(x.transpose(0, 3, 1, 2))).feature_maps[-1]
        logits = vit(pixel_values=features).logits
    return features.numpy().transpose(0, 2, 3, 1), logits.numpy()


def _hybrid_state(bit, vit):
    """The weights in the layout of Hugging Face's ViTHybrid files (backbone under patch_embeddings)."""
    state = {f"vit.embeddings.patch_embeddings.backbone.{k}": v for k, v in bit.state_dict().items()}
    state.update(vit.state_dict())
    return {k: v.contiguous() for k, v in state.items()}


def _timm_state(bit, vit):
    """The same weights under timm's hybrid names (ResNetV2 backbone, fused qkv)."""
    out = {}
    for k, v in bit.state_dict().items():
        k = k.replace("bit.embedder.convolution", "stem.conv").replace("bit.embedder.norm", "stem.norm")
        k = k.replace("bit.encoder.stages.", "stages.").replace(".layers.", ".blocks.")
        out[f"patch_embed.backbone.{k}"] = v
    out.update(torch_layouts.timm_names(vit.state_dict(), 2))
    return {k: v.contiguous() for k, v in out.items()}


def _google_arrays(bit, vit):
    """The same weights in Google's hybrid .npz layout, GroupNorm parameters stored as (1, 1, 1, C)."""
    b = {k: v.numpy() for k, v in bit.state_dict().items()}
    hwio = lambda w: w.transpose(2, 3, 1, 0)  # noqa: E731
    gn = lambda w: w.reshape(1, 1, 1, -1)  # noqa: E731
    out = {"conv_root/kernel": hwio(b["bit.embedder.convolution.weight"]),
           "gn_root/scale": gn(b["bit.embedder.norm.weight"]), "gn_root/bias": gn(b["bit.embedder.norm.bias"])}
    for s, units in enumerate(DEPTHS):
        for u in range(units):
            src, dst = f"bit.encoder.stages.{s}.layers.{u}", f"block{s + 1}/unit{u + 1}"
            for i in (1, 2, 3):
                out[f"{dst}/conv{i}/kernel"] = hwio(b[f"{src}.conv{i}.weight"])
                out[f"{dst}/gn{i}/scale"] = gn(b[f"{src}.norm{i}.weight"])
                out[f"{dst}/gn{i}/bias"] = gn(b[f"{src}.norm{i}.bias"])
            if f"{src}.downsample.conv.weight" in b:
                out[f"{dst}/conv_proj/kernel"] = hwio(b[f"{src}.downsample.conv.weight"])
                out[f"{dst}/gn_proj/scale"] = gn(b[f"{src}.downsample.norm.weight"])
                out[f"{dst}/gn_proj/bias"] = gn(b[f"{src}.downsample.norm.bias"])
    v = {k.replace("vit.", "", 1): t.numpy() for k, t in vit.state_dict().items()}
    d, heads = 32, 4
    out.update({
        "cls": v["embeddings.cls_token"], "Transformer/posembed_input/pos_embedding": v["embeddings.position_embeddings"],
        "embedding/kernel": hwio(v["embeddings.patch_embeddings.projection.weight"]),
        "embedding/bias": v["embeddings.patch_embeddings.projection.bias"],
        "Transformer/encoder_norm/scale": v["layernorm.weight"], "Transformer/encoder_norm/bias": v["layernorm.bias"],
        "head/kernel": v["classifier.weight"].T, "head/bias": v["classifier.bias"],
    })
    for i in range(2):
        p, blk = f"layers.{i}", f"Transformer/encoderblock_{i}"
        att = f"{blk}/MultiHeadDotProductAttention_1"
        for n, t in (("query", "q"), ("key", "k"), ("value", "v")):
            out[f"{att}/{n}/kernel"] = v[f"{p}.attention.{t}_proj.weight"].T.reshape(d, heads, d // heads)
            out[f"{att}/{n}/bias"] = v[f"{p}.attention.{t}_proj.bias"].reshape(heads, d // heads)
        out[f"{att}/out/kernel"] = v[f"{p}.attention.o_proj.weight"].T.reshape(heads, d // heads, d)
        out[f"{att}/out/bias"] = v[f"{p}.attention.o_proj.bias"]
        for ln, src in (("LayerNorm_0", "layernorm_before"), ("LayerNorm_2", "layernorm_after")):
            out[f"{blk}/{ln}/scale"], out[f"{blk}/{ln}/bias"] = v[f"{p}.{src}.weight"], v[f"{p}.{src}.bias"]
        for dense, src in (("Dense_0", "fc1"), ("Dense_1", "fc2")):
            out[f"{blk}/MlpBlock_3/{dense}/kernel"] = v[f"{p}.mlp.{src}.weight"].T
            out[f"{blk}/MlpBlock_3/{dense}/bias"] = v[f"{p}.mlp.{src}.bias"]
    return out


@pytest.mark.parametrize("layout", ["huggingface", "timm", "google"])
def test_hybrid_matches_bit_features_and_hugging_face_vit(tmp_path, hf_hybrid, layout):
    bit, vit = hf_hybrid
    if layout == "google":
        path = tmp_path / "R-tiny.npz"
        np.savez(path, **_google_arrays(bit, vit))
    else:
        path = tmp_path / f"{layout}.safetensors"
        state = _hybrid_state(bit, vit) if layout == "huggingface" else _timm_state(bit, vit)
        safetensors_torch.save_file(state, str(path))
    model = _ours()
    report = load_pretrained(model, str(path))
    assert report.layout == {"google": "google", "timm": "timm", "huggingface": "huggingface"}[layout]
    assert report.head == "loaded" and report.resampled is None
    x = _x()
    their_features, their_logits = _hf_features_and_logits(bit, vit, x)
    feature_model = keras.Model(model.inputs, model.get_layer("patches").input)
    ours = feature_model.predict(x, verbose=0)
    assert ours.shape == their_features.shape == (2, IMAGE // 8, IMAGE // 8, 512)
    assert np.abs(their_features).max() > 0.1
    np.testing.assert_allclose(ours, their_features, atol=1e-4, rtol=0)
    np.testing.assert_allclose(model.predict(x, verbose=0), their_logits, atol=1e-4, rtol=0)


def test_hybrid_checkpoint_loads_at_a_higher_resolution(tmp_path, hf_hybrid):
    bit, vit = hf_hybrid
    path = tmp_path / "R-tiny.npz"
    np.savez(path, **_google_arrays(bit, vit))
    model = keras_vit.VisionTransformer(
        patch_size=1, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, input_shape=(96, 128, 3),
        classes=3, resnet_num_layers=DEPTHS,
    )
    report = load_pretrained(model, str(path))
    assert report.resampled == ((8, 8), (12, 16)) and report.head == "reset"
    out = model.predict(np.random.default_rng(0).uniform(-1, 1, (2, 96, 128, 3)).astype("float32"), verbose=0)
    assert out.shape == (2, 3) and np.allclose(out, 1 / 3)


def test_hybrid_into_a_pure_vit_names_the_extra_keys(tmp_path, hf_hybrid):
    bit, vit = hf_hybrid
    path = tmp_path / "R-tiny.npz"
    np.savez(path, **_google_arrays(bit, vit))
    pure = keras_vit.VisionTransformer(patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                                       input_shape=(64, 64, 3), classes=5)
    with pytest.raises(ValueError, match=r"'embedding/kernel' has shape \(1, 1, 512, 32\), the model needs \(8, 8, 3, 32\)"):
        load_pretrained(pure, str(path))
