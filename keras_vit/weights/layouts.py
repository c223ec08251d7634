"""Checkpoint files and their parameter-name layouts, all turned into one.

Every layout found in the wild is rewritten into the *canonical layout*: the
pre-linen Flax names of Google's original `.npz` files
(google-research/vision_transformer, `models_vit.py`; table in
CHECKPOINTS.md), with arrays in the shapes those files use:

    cls                                                        (1, 1, D)
    dist               DeiT's distillation token, distilled models (1, 1, D)
    embedding/kernel, embedding/bias                           (P, P, C, D), (D,)
    Transformer/posembed_input/pos_embedding                   (1, S, D)
    Transformer/encoderblock_{i}/LayerNorm_0/{scale,bias}      (D,)
    .../MultiHeadDotProductAttention_1/{query,key,value}/kernel (D, H, D/H)
    .../MultiHeadDotProductAttention_1/{query,key,value}/bias   (H, D/H)
    .../MultiHeadDotProductAttention_1/out/kernel, out/bias     (H, D/H, D), (D,)
    .../LayerNorm_2/{scale,bias}                                (D,)
    .../MlpBlock_3/Dense_0/{kernel,bias}                        (D, M), (M,)
    .../MlpBlock_3/Dense_1/{kernel,bias}                        (M, D), (D,)
    Transformer/encoder_norm/{scale,bias}                       (D,)
    pre_logits/{kernel,bias}                                    (D, R), (R,)
    head/{kernel,bias}                                          (D or R, K), (K,)
    head_dist/{kernel,bias}   DeiT's distillation head          (D, K), (K,)

Layouts read (`detect_layout` names them):
    "google": pre-linen Flax (`MultiHeadDotProductAttention_1`, `LayerNorm_0/2`,
        `MlpBlock_3`), linen (`_0`/`_1` numbering), with or without an
        `opt/target/` prefix.
    "big_vision": a `params/` prefix, `pos_embedding` at the top level, and
        optionally the scanned layout (`Transformer/encoderblock/...` with all
        layers stacked on a leading axis).
    "huggingface": transformers' ViT (`vit.embeddings...`, `encoder.layer.{i}.
        attention.attention.query` in 4.x files, `layers.{i}.attention.q_proj`
        in 5.x), PyTorch (out, in) layouts; its DeiT (`deit.` prefix,
        `embeddings.distillation_token`, `cls_classifier` and
        `distillation_classifier` of `DeiTForImageClassificationWithTeacher`).
    "timm": `cls_token`, `pos_embed`, `blocks.{i}.attn.qkv` (fused), PyTorch
        layouts; DeiT's distilled models add `dist_token` and `head_dist`
        (timm's `VisionTransformerDistilled`).
The rules follow timm's `_load_weights` / `_n2p` and big_vision's
`load`/`convert_pre_linen` (CHECKPOINTS.md).
"""

import os
import re
import zipfile

import ml_dtypes  # noqa: F401 (numpy's bfloat16 and float8 types, which safetensors maps BF16 tensors to; a keras dependency)
import numpy as np

ATTENTION = "MultiHeadDotProductAttention_1"
LN1, LN2, MLP = "LayerNorm_0", "LayerNorm_2", "MlpBlock_3"
BLOCK = "Transformer/encoderblock_{}"
POS = "Transformer/posembed_input/pos_embedding"
FORMATS = (".npz", ".safetensors")


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit the model; the message names the key."""


def read_checkpoint(path):
    """Reads a checkpoint file into a dict of float32 NumPy arrays.

    Args:
        path: str or os.PathLike: a NumPy `.npz` archive (Google's layouts) or
            a `.safetensors` file (Hugging Face or timm, bfloat16, float16 or
            float32; bfloat16, the dtype most recent checkpoints are
            published in, is widened to float32 exactly).

    Returns:
        dict name -> np.ndarray (float32), names as stored in the file.

    Raises:
        CheckpointError: the file is missing, has another extension, or is
            not a valid archive of that kind (truncated or corrupt).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"Checkpoint file not found. Received: {path!r}")
    ext = os.path.splitext(path)[1].lower()
    if ext not in FORMATS:
        raise CheckpointError(
            f"Checkpoint must be a .npz (Google) or .safetensors (Hugging Face, timm) file. Received: {path!r}. "
            "PyTorch .bin/.pth state dicts: load them with torch and save with safetensors.torch.save_file first."
        )
    try:
        if ext == ".npz":
            with np.load(path, allow_pickle=False) as data:
                arrays = {k: np.asarray(data[k]) for k in data.files}
        else:
            from safetensors.numpy import load_file

            arrays = load_file(path)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, RuntimeError, KeyError) as e:
        raise CheckpointError(
            f"Checkpoint {path!r} could not be read ({type(e).__name__}: {str(e)[:200]}); "
            "the file is truncated, corrupt or not a checkpoint"
        ) from None
    except Exception as e:  # safetensors raises its own SafetensorError
        raise CheckpointError(
            f"Checkpoint {path!r} could not be read ({type(e).__name__}: {str(e)[:200]}); "
            "the file is truncated, corrupt or not a checkpoint"
        ) from None
    if not arrays:
        raise CheckpointError(f"Checkpoint {path!r} holds no arrays")
    return as_float_arrays(arrays, path)


# ml_dtypes' float types (NumPy kind "V"): bfloat16 and the float8 kinds safetensors stores (BF16, F8_E4M3, F8_E5M2).
_ML_FLOATS = {np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(ml_dtypes.float8_e5m2)}


def as_float_arrays(arrays, source="arrays"):
    """Returns the arrays as float32 (bfloat16 and float8 widened exactly), raising CheckpointError for a
    non-numeric one (named)."""
    out = {}
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.kind not in "fiu" and value.dtype not in _ML_FLOATS:  # strings, objects, complex, booleans
            raise CheckpointError(f"Checkpoint {source!r}: array {key!r} has dtype {value.dtype}, not a real number type")
        out[key] = value.astype(np.float32)
    return out


def detect_layout(arrays):
    """Names the layout of a dict of checkpoint arrays: "google", "big_vision", "huggingface" or "timm".

    Raises:
        CheckpointError: no known layout matches (the message lists some keys).
    """
    keys = set(arrays)
    stripped = {_strip_prefix(k) for k in keys}
    if any(k.startswith("params/") for k in keys) or "pos_embedding" in stripped:
        return "big_vision"
    if any(k.startswith("Transformer/") for k in stripped) or "embedding/kernel" in stripped:
        return "google"
    if any(k.startswith(("vit.", "deit.", "embeddings.")) for k in keys):
        return "huggingface"
    if "patch_embed.proj.weight" in keys or any(k.startswith("blocks.") for k in keys):
        return "timm"
    sample = ", ".join(sorted(keys)[:5])
    raise CheckpointError(f"Unknown checkpoint layout: no ViT parameter names found (first keys: {sample})")


def to_canonical(arrays, num_heads=None):
    """Rewrites checkpoint arrays of any known layout into the canonical (Google pre-linen) layout.

    Args:
        arrays: dict name -> np.ndarray, as `read_checkpoint` returns.
        num_heads: int, attention heads; needed only for PyTorch layouts
            (Hugging Face, timm), whose fused (D, D) projections do not
            record it. Google layouts carry it in their (D, H, D/H) shapes.

    Returns:
        (canonical dict, layout name).

    Raises:
        CheckpointError: unknown layout; a PyTorch layout without
            `num_heads`, or a key the layout does not know (named).
    """
    layout = detect_layout(arrays)
    if layout in ("huggingface", "timm") and num_heads is None:
        raise CheckpointError(f"A {layout} checkpoint needs `num_heads` (its attention weights are fused)")
    if num_heads is not None:
        from keras_vit.common.validation import check_positive_int

        num_heads = check_positive_int("num_heads", num_heads)
    convert = {"google": _from_google, "big_vision": _from_big_vision, "huggingface": _from_hf, "timm": _from_timm}
    try:
        return convert[layout](arrays, num_heads), layout
    except CheckpointError:
        raise
    except (ValueError, IndexError) as e:  # a reshape or split of an array with an unexpected shape
        raise CheckpointError(f"{layout} checkpoint arrays have unexpected shapes: {e}") from None


def _strip_prefix(key):
    for prefix in ("opt/target/", "params/"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    return key


def _rename_block_parts(parts):
    """Maps one block's sub-module names (any Flax numbering) to the pre-linen ones."""
    norms = sorted({p for p in parts if p.startswith("LayerNorm_")}, key=lambda p: int(p.split("_")[1]))
    mapping = {}
    if len(norms) == 2:
        mapping.update({norms[0]: LN1, norms[1]: LN2})
    for p in parts:
        if p.startswith("MultiHeadDotProductAttention_"):
            mapping[p] = ATTENTION
        elif p.startswith("MlpBlock_"):
            mapping[p] = MLP
    return mapping


def _from_google(arrays, num_heads=None, source="google"):
    out = {}
    blocks = {}
    for key, value in arrays.items():
        key = _strip_prefix(key)
        if key == "pos_embedding":  # big_vision keeps it at the top level
            key = POS
        m = re.fullmatch(r"Transformer/encoderblock(_\d+)?/([^/]+)/(.+)", key)
        if m:
            blocks.setdefault(m.group(1), {})[(m.group(2), m.group(3))] = value
        else:
            out[key] = value
    for index, params in blocks.items():
        mapping = _rename_block_parts({part for part, _ in params})
        for (part, rest), value in params.items():
            if part not in mapping:
                raise CheckpointError(f"Unknown {source} block parameter: Transformer/encoderblock{index or ''}/{part}/{rest}")
            if index is None:  # scanned: all layers stacked on axis 0
                for i in range(value.shape[0]):
                    out[f"{BLOCK.format(i)}/{mapping[part]}/{rest}"] = value[i]
            else:
                out[f"{BLOCK.format(index[1:])}/{mapping[part]}/{rest}"] = value
    for key, value in out.items():
        # GroupNorm parameters may be stored as (1, 1, 1, C) (timm _n2p, GR _fix_groupnorm)
        if key.endswith(("/scale", "/bias")) and value.ndim == 4:
            out[key] = value.reshape(-1)
    return out


def _from_big_vision(arrays, num_heads=None):
    return _from_google(arrays, num_heads, source="big_vision")


def _attention(prefix, q, k, v, q_b, k_b, v_b, o, o_b, num_heads, key):
    """PyTorch (out, in) projections -> Flax (D, H, D/H) and (H, D/H, D) kernels."""
    width = q.shape[0]
    if width % num_heads:
        raise CheckpointError(f"{key}: attention width {width} is not divisible by num_heads={num_heads}")
    head_dim = width // num_heads
    out = {}
    for name, w, b in (("query", q, q_b), ("key", k, k_b), ("value", v, v_b)):
        out[f"{prefix}/{ATTENTION}/{name}/kernel"] = w.T.reshape(w.shape[1], num_heads, head_dim)
        out[f"{prefix}/{ATTENTION}/{name}/bias"] = b.reshape(num_heads, head_dim)
    out[f"{prefix}/{ATTENTION}/out/kernel"] = o.T.reshape(num_heads, head_dim, o.shape[0])
    out[f"{prefix}/{ATTENTION}/out/bias"] = o_b
    return out


def _dense(out, target, arrays, source, used):
    out[f"{target}/kernel"] = _get(arrays, f"{source}.weight", "PyTorch").T
    out[f"{target}/bias"] = _get(arrays, f"{source}.bias", "PyTorch")
    used.update({f"{source}.weight", f"{source}.bias"})


def _norm(out, target, arrays, source, used):
    out[f"{target}/scale"] = _get(arrays, f"{source}.weight", "PyTorch")
    out[f"{target}/bias"] = _get(arrays, f"{source}.bias", "PyTorch")
    used.update({f"{source}.weight", f"{source}.bias"})


def _common_torch(arrays, out, used, cls, pos, patch, dist):
    for key, name in ((cls, "cls"), (dist, "dist")):
        if key in arrays:
            out[name] = arrays[key]
            used.add(key)
    out[POS] = arrays[pos]
    out["embedding/kernel"] = _get(arrays, f"{patch}.weight", "PyTorch").transpose(2, 3, 1, 0)  # OIHW -> HWIO
    out["embedding/bias"] = _get(arrays, f"{patch}.bias", "PyTorch")
    used.update({pos, f"{patch}.weight", f"{patch}.bias"})


def _get(arrays, key, layout):
    if key not in arrays:
        raise CheckpointError(f"{layout} checkpoint is missing key {key!r}")
    return arrays[key]


def _from_hf(arrays, num_heads):
    arrays = {k.split(".", 1)[1] if k.startswith(("vit.", "deit.")) else k: v for k, v in arrays.items()}
    out, used = {}, set()
    _resnet_from_torch(arrays, out, used, "embeddings.patch_embeddings.backbone.bit.", "embedder.convolution",
                       "embedder.norm", "encoder.stages.{}.layers.{}.")
    for key in ("embeddings.position_embeddings", "embeddings.patch_embeddings.projection.weight"):
        _get(arrays, key, "huggingface")
    _common_torch(arrays, out, used, "embeddings.cls_token", "embeddings.position_embeddings",
                  "embeddings.patch_embeddings.projection", "embeddings.distillation_token")
    indices = sorted({int(m.group(2)) for k in arrays if (m := re.match(r"(encoder\.layer|layers)\.(\d+)\.", k))})
    for i in indices:
        new = f"layers.{i}" if f"layers.{i}.attention.q_proj.weight" in arrays else None
        p = f"encoder.layer.{i}"
        names = (
            {"q": f"{new}.attention.q_proj", "k": f"{new}.attention.k_proj", "v": f"{new}.attention.v_proj",
             "o": f"{new}.attention.o_proj", "fc1": f"{new}.mlp.fc1", "fc2": f"{new}.mlp.fc2",
             "ln1": f"{new}.layernorm_before", "ln2": f"{new}.layernorm_after"}
            if new else
            {"q": f"{p}.attention.attention.query", "k": f"{p}.attention.attention.key",
             "v": f"{p}.attention.attention.value", "o": f"{p}.attention.output.dense",
             "fc1": f"{p}.intermediate.dense", "fc2": f"{p}.output.dense",
             "ln1": f"{p}.layernorm_before", "ln2": f"{p}.layernorm_after"}
        )
        w = {n: _get(arrays, f"{s}.weight", "huggingface") for n, s in names.items()}
        b = {n: _get(arrays, f"{s}.bias", "huggingface") for n, s in names.items()}
        used.update(f"{s}.{t}" for s in names.values() for t in ("weight", "bias"))
        prefix = BLOCK.format(i)
        out.update(_attention(prefix, w["q"], w["k"], w["v"], b["q"], b["k"], b["v"], w["o"], b["o"],
                              num_heads, f"{names['q']}.weight"))
        _norms_and_mlp(out, prefix, arrays, used, names["ln1"], names["ln2"], names["fc1"], names["fc2"])
    head = "cls_classifier" if "cls_classifier.weight" in arrays else "classifier"  # DeiT's two heads, ViT's one
    return _finish(out, arrays, used, "huggingface", "layernorm", "pooler.dense", head, "distillation_classifier")


def _from_timm(arrays, num_heads):
    out, used = {}, set()
    if any(k.startswith("fc_norm.") for k in arrays):
        raise CheckpointError("timm checkpoint has fc_norm (a global-average-pool head with its own LayerNorm), "
                              "which keras_vit's ViT has no place for")
    _resnet_from_torch(arrays, out, used, "patch_embed.backbone.", "stem.conv", "stem.norm", "stages.{}.blocks.{}.")
    for key in ("pos_embed", "patch_embed.proj.weight", "norm.weight"):
        _get(arrays, key, "timm")
    _common_torch(arrays, out, used, "cls_token", "pos_embed", "patch_embed.proj", "dist_token")
    indices = sorted({int(m.group(1)) for k in arrays if (m := re.match(r"blocks\.(\d+)\.", k))})
    for i in indices:
        p = f"blocks.{i}"
        qkv_w = _get(arrays, f"{p}.attn.qkv.weight", "timm")
        qkv_b = _get(arrays, f"{p}.attn.qkv.bias", "timm")
        if qkv_w.shape[0] % 3:
            raise CheckpointError(f"{p}.attn.qkv.weight: first axis {qkv_w.shape[0]} is not 3 x width")
        q, k, v = np.split(qkv_w, 3, axis=0)
        qb, kb, vb = np.split(qkv_b, 3, axis=0)
        o = _get(arrays, f"{p}.attn.proj.weight", "timm")
        ob = _get(arrays, f"{p}.attn.proj.bias", "timm")
        used.update({f"{p}.attn.qkv.weight", f"{p}.attn.qkv.bias", f"{p}.attn.proj.weight", f"{p}.attn.proj.bias"})
        prefix = BLOCK.format(i)
        out.update(_attention(prefix, q, k, v, qb, kb, vb, o, ob, num_heads, f"{p}.attn.qkv.weight"))
        _norms_and_mlp(out, prefix, arrays, used, f"{p}.norm1", f"{p}.norm2", f"{p}.mlp.fc1", f"{p}.mlp.fc2")
    return _finish(out, arrays, used, "timm", "norm", "pre_logits.fc", "head", "head_dist")


def _resnet_from_torch(arrays, out, used, prefix, stem_conv, stem_norm, unit):
    """The hybrid's ResNet (BiT, non-pre-activation bottlenecks) from PyTorch names into Google's.

    timm `ResNetV2` (`stem.conv`, `stages.{s}.blocks.{u}.conv1..3`, `norm1..3`,
    `downsample.conv/norm`) and Hugging Face `BitModel` (`embedder.convolution`,
    `encoder.stages.{s}.layers.{u}...`) -> `conv_root`, `gn_root`,
    `block{s+1}/unit{u+1}/conv1..3`, `gn1..3`, `conv_proj`, `gn_proj`; OIHW
    kernels become HWIO.
    """
    if f"{prefix}{stem_conv}.weight" not in arrays:
        return

    def conv(target, source):
        out[f"{target}/kernel"] = _get(arrays, f"{prefix}{source}.weight", "PyTorch").transpose(2, 3, 1, 0)
        used.add(f"{prefix}{source}.weight")

    def norm(target, source):
        _norm(out, target, arrays, f"{prefix}{source}", used)

    conv("conv_root", stem_conv)
    norm("gn_root", stem_norm)
    pattern = re.compile(re.escape(prefix) + unit.replace(".", r"\.").format(r"(\d+)", r"(\d+)"))
    units = sorted({(int(m.group(1)), int(m.group(2))) for k in arrays if (m := pattern.match(k))})
    for s, u in units:
        source, target = unit.format(s, u), f"block{s + 1}/unit{u + 1}"
        for i in (1, 2, 3):
            conv(f"{target}/conv{i}", f"{source}conv{i}")
            norm(f"{target}/gn{i}", f"{source}norm{i}")
        if f"{prefix}{source}downsample.conv.weight" in arrays:
            conv(f"{target}/conv_proj", f"{source}downsample.conv")
            norm(f"{target}/gn_proj", f"{source}downsample.norm")


def _norms_and_mlp(out, prefix, arrays, used, ln1, ln2, fc1, fc2):
    _norm(out, f"{prefix}/{LN1}", arrays, ln1, used)
    _norm(out, f"{prefix}/{LN2}", arrays, ln2, used)
    _dense(out, f"{prefix}/{MLP}/Dense_0", arrays, fc1, used)
    _dense(out, f"{prefix}/{MLP}/Dense_1", arrays, fc2, used)


def _finish(out, arrays, used, layout, norm, pre_logits, head, head_dist):
    """Final norm, optional pre_logits, head and DeiT's distillation head, then the check that every array found a
    place."""
    _norm(out, "Transformer/encoder_norm", arrays, norm, used)
    if f"{pre_logits}.weight" in arrays:
        _dense(out, "pre_logits", arrays, pre_logits, used)
    for source, target in ((head, "head"), (head_dist, "head_dist")):
        if f"{source}.weight" in arrays:
            _dense(out, target, arrays, source, used)
    _check_all_used(arrays, used, layout)
    return out


def _check_all_used(arrays, used, layout):
    unknown = sorted(set(arrays) - used)
    if unknown:
        raise CheckpointError(
            f"{layout} checkpoint has keys keras_vit's ViT has no place for: {', '.join(unknown[:6])}"
            + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
            + " (a different architecture, e.g. register tokens, or fc_norm)"
        )

