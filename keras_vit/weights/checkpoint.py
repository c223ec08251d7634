"""Saving a keras_vit model in Google's checkpoint layout, and reading the config a checkpoint was trained with."""

import os

import numpy as np

from keras_vit.weights import layouts
from keras_vit.weights.layouts import ATTENTION, BLOCK, MLP, POS, CheckpointError
from keras_vit.weights.loader import stage_units, check_not_quantized, describe, model_variables, read_position_table

# hidden_size -> num_heads of the published variants (head width 64, 80 for H); PyTorch layouts do not record it.
HEADS_BY_WIDTH = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}


def to_canonical_arrays(model):
    """Returns the model's weights as a dict in the canonical (Google pre-linen) layout, float32."""
    d = describe(model)
    check_not_quantized(model, "A checkpoint (save_checkpoint)")
    if d["position_embedding"] != "learned":
        raise CheckpointError(
            f"The checkpoint layout holds a learned 1D position embedding; model {model.name!r} has "
            f"position_embedding={d['position_embedding']!r} (save it as .keras or .weights.h5 instead)"
        )
    out = {key: np.asarray(var.numpy(), np.float32) for key, var in model_variables(model).items()}
    p, c = d["patch_size"], d["channels"]
    out["embedding/kernel"] = out["embedding/kernel"].reshape(p, p, c, d["hidden_size"])
    out[POS] = np.asarray(d["encoder"].position_embedding.numpy(), np.float32)
    return out


def save_checkpoint(model, path, overwrite=False):
    """Saves a keras_vit model's weights as an `.npz` in Google's pre-linen layout.

    The file loads back with `load_pretrained` (at any resolution, with or
    without the head). It has the key names and array shapes of Google's
    original files (google-research/vision_transformer), and vit-keras'
    loader of those files (`vit_keras.utils.load_weights_numpy`) reads the
    file of a pure ViT with a class token, every array used, giving the
    model's logits within 5e-6 (tests/weights/test_parity.py). Not tested
    here: Google's own JAX loader, and timm's `.npz` loader (timm cannot be
    imported on this project's machines: it needs torchvision). Written to a
    temporary file and moved into place.

    Args:
        model: a keras_vit Vision Transformer.
        path: destination, must end in ".npz".
        overwrite: replace an existing file.

    Returns:
        `path`.

    Raises:
        ValueError: `path` does not end in ".npz"; FileExistsError: it
            exists and `overwrite` is False; CheckpointError: a model
            quantised with `model.quantize` (checkpoints hold float weights),
            or a position embedding other than "learned".
    """
    from keras_vit.common.files import staged

    from keras_vit.common.validation import check_bool

    path = os.fspath(path)
    check_bool("overwrite", overwrite)
    if not path.endswith(".npz"):
        raise ValueError(f"`path` must end in '.npz'. Received: path={path!r}")
    if os.path.isdir(path):
        raise ValueError(f"`path` is a folder; give a file name. Received: path={path!r}")
    arrays = to_canonical_arrays(model)
    with staged(path, overwrite) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)
    return path


def infer_config(arrays, num_heads=None):
    """Reads the `VisionTransformer` arguments a checkpoint was trained with.

    Args:
        arrays: dict of checkpoint arrays (any layout).
        num_heads: needed for PyTorch layouts whose width is not one of the
            published variants'; otherwise read from the file or the variant
            table.

    Returns:
        dict with patch_size, hidden_size, num_layers, num_heads, mlp_dim,
        representation_size, class_token, distillation_token (DeiT's
        `dist` token and second head), classifier ("token" whenever there
        is a class token: the file does not record pooling), classes (or
        None without a head), image_size (square side in pixels, assuming a
        square patch grid with or without a class-token row, or None when
        the count is not a square), channels (of the input images), and the
        hybrid's resnet_num_layers (None for a pure ViT) and
        resnet_width_factor.

    Raises:
        CheckpointError: unknown layout, or `num_heads` needed and not known.
    """
    layout = layouts.detect_layout(arrays)
    if layout in ("huggingface", "timm") and num_heads is None:
        weight = next((v for k, v in arrays.items() if k.endswith(("patch_embed.proj.weight", "projection.weight"))),
                      None)
        if weight is None:
            raise CheckpointError(f"{layout} checkpoint has no patch projection ('patch_embed.proj.weight')")
        num_heads = HEADS_BY_WIDTH.get(weight.shape[0])
        if num_heads is None:
            raise CheckpointError(f"Width {weight.shape[0]} is not a published variant's; pass num_heads")
    canon, _ = layouts.to_canonical(arrays, num_heads=num_heads)
    kernel = canon["embedding/kernel"]
    layers = len({k.split("/")[1] for k in canon if k.startswith("Transformer/encoderblock_")})
    q = canon[f"{BLOCK.format(0)}/{ATTENTION}/query/kernel"]
    class_token = "cls" in canon
    distillation_token = "dist" in canon
    try:  # a square grid, with or without a class-token row (and a distillation token's row before it)
        side = read_position_table(canon[POS].shape[1] - distillation_token, class_token)[1][0]
    except CheckpointError:  # not square: the file cannot tell the grid
        side = None
    resnet, width_factor, channels, stride = None, 1, int(kernel.shape[2]), 1
    if "conv_root/kernel" in canon:  # hybrid: the patches are cut from the ResNet's feature map
        resnet = stage_units(canon, r"block(\d+)/unit(\d+)/")
        width_factor = int(canon["conv_root/kernel"].shape[3]) // 64
        channels = int(canon["conv_root/kernel"].shape[2])
        from keras_vit.models.resnet import output_stride

        stride = output_stride(resnet)
    return {
        "patch_size": int(kernel.shape[0]),
        "channels": channels,
        "resnet_num_layers": resnet,
        "resnet_width_factor": width_factor,
        "hidden_size": int(kernel.shape[3]),
        "num_layers": layers,
        "num_heads": int(q.shape[1]),
        "mlp_dim": int(canon[f"{BLOCK.format(0)}/{MLP}/Dense_0/kernel"].shape[1]),
        "representation_size": int(canon["pre_logits/kernel"].shape[1]) if "pre_logits/kernel" in canon else None,
        "class_token": class_token,
        "distillation_token": distillation_token,
        # A file cannot tell a class-token model that pools by averaging (classifier="gap", class_token=True).
        "classifier": "token" if class_token else "gap",
        "classes": int(canon["head/kernel"].shape[1]) if "head/kernel" in canon else None,
        "image_size": side * int(kernel.shape[0]) * stride if side else None,
    }
