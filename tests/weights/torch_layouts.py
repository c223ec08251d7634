"""Renaming Hugging Face ViT state dicts into the other PyTorch layouts, written for the tests (no keras_vit code)."""

import torch


def old_hf_names(state):
    """transformers 4.x parameter names (those of the files on the Hugging Face hub)."""
    out = {}
    for k, v in state.items():
        k = k.replace("vit.layers.", "vit.encoder.layer.")
        for new, old in (("attention.q_proj", "attention.attention.query"), ("attention.k_proj", "attention.attention.key"),
                         ("attention.v_proj", "attention.attention.value"), ("attention.o_proj", "attention.output.dense"),
                         ("mlp.fc1", "intermediate.dense"), ("mlp.fc2", "output.dense")):
            k = k.replace(new, old)
        out[k] = v
    return out


def timm_names(state, layers):
    """The same weights in timm's VisionTransformer names, q/k/v fused into one qkv."""
    s = {k.replace("vit.", "", 1): v for k, v in state.items()}
    out = {
        "cls_token": s["embeddings.cls_token"],
        "pos_embed": s["embeddings.position_embeddings"],
        "patch_embed.proj.weight": s["embeddings.patch_embeddings.projection.weight"],
        "patch_embed.proj.bias": s["embeddings.patch_embeddings.projection.bias"],
        "norm.weight": s["layernorm.weight"],
        "norm.bias": s["layernorm.bias"],
        "head.weight": s["classifier.weight"],
        "head.bias": s["classifier.bias"],
    }
    for i in range(layers):
        p = f"layers.{i}"
        a = f"{p}.attention"
        out[f"blocks.{i}.attn.qkv.weight"] = torch.cat([s[f"{a}.{n}_proj.weight"] for n in "qkv"])
        out[f"blocks.{i}.attn.qkv.bias"] = torch.cat([s[f"{a}.{n}_proj.bias"] for n in "qkv"])
        for ours, theirs in (("attn.proj", "attention.o_proj"), ("norm1", "layernorm_before"),
                             ("norm2", "layernorm_after"), ("mlp.fc1", "mlp.fc1"), ("mlp.fc2", "mlp.fc2")):
            for t in ("weight", "bias"):
                out[f"blocks.{i}.{ours}.{t}"] = s[f"{p}.{theirs}.{t}"]
    return out


def timm_deit_names(state, layers):
    """A Hugging Face `DeiTForImageClassificationWithTeacher` state dict in timm's `VisionTransformerDistilled` names
    (`dist_token`, `head`, `head_dist`), q/k/v fused into one qkv."""
    s = {k.replace("deit.", "vit.", 1): v for k, v in state.items()}
    s["vit.layernorm.weight"], s["vit.layernorm.bias"] = s.pop("vit.layernorm.weight"), s.pop("vit.layernorm.bias")
    s["classifier.weight"], s["classifier.bias"] = s.pop("cls_classifier.weight"), s.pop("cls_classifier.bias")
    dist = s.pop("vit.embeddings.distillation_token")
    head_dist = s.pop("distillation_classifier.weight"), s.pop("distillation_classifier.bias")
    out = timm_names(s, layers)
    out["dist_token"] = dist
    out["head_dist.weight"], out["head_dist.bias"] = head_dist
    return out
