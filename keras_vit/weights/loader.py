"""Loading checkpoints into keras_vit models, and saving them back in Google's layout."""

import dataclasses
import logging
import math
import os
import re

import numpy as np

from keras_vit.weights import layouts
from keras_vit.weights.layouts import ATTENTION, BLOCK, LN1, LN2, MLP, POS, CheckpointError
from keras_vit.common.validation import is_int
from keras_vit.weights.resample import resample_position_embedding

LOG = logging.getLogger("keras_vit.weights")
HEAD_MODES = ("auto", "load", "reset")


@dataclasses.dataclass
class LoadReport:
    """What `load_pretrained` did.

    Attributes:
        layout: the checkpoint's layout ("google", "big_vision", "huggingface", "timm").
        loaded: canonical names of the arrays copied into the model.
        resampled: None, or ((rows, cols) before, (rows, cols) after) when
            the position embeddings were resampled.
        head: "loaded", "reset" (zero-initialised) or "none" (the model has no head).
        messages: the messages logged, in order.
    """

    layout: str
    loaded: list
    resampled: object = None
    head: str = "none"
    messages: list = dataclasses.field(default_factory=list)

    def say(self, message):
        self.messages.append(message)


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        return None


def describe(model):
    """Returns the architecture of a keras_vit model as a dict (patch size, grid, widths, layers).

    Raises:
        CheckpointError: the model is not a keras_vit Vision Transformer (no
            `patch_encoder` layer of type `PatchEncoder`).
    """
    from keras_vit.layers import PatchEncoder

    encoder = _layer(model, "patch_encoder")
    patches = _layer(model, "patches")
    if not isinstance(encoder, PatchEncoder) or patches is None:
        raise CheckpointError(
            f"Model {model.name!r} is not a keras_vit Vision Transformer (it has no 'patches' and 'patch_encoder' layers)"
        )
    _, height, width, channels = patches.input.shape
    grid = encoder.grid_size or (height // patches.patch_size, width // patches.patch_size)
    blocks = []
    while (block := _layer(model, f"transformer_block_{len(blocks)}")) is not None:
        blocks.append(block)
    p = patches.patch_size
    return {
        "patch_size": p,
        "channels": channels,
        "grid": tuple(grid),
        "position_embedding": encoder.position_embedding_kind,
        "hidden_size": encoder.hidden_size,
        "class_token": encoder.class_token,
        "distillation_token": encoder.distillation_token,
        "num_layers": len(blocks),
        "num_heads": blocks[0].num_heads if blocks else None,
        "mlp_dim": blocks[0].mlp_dim if blocks else None,
        "encoder": encoder,
        "blocks": blocks,
        "encoder_norm": _layer(model, "encoder_norm"),
        "pre_logits": _layer(model, "pre_logits"),
        "head": _layer(model, "predictions"),
    }


def check_not_quantized(model, what):
    """Raises CheckpointError when `model` holds layers quantised by Keras (`model.quantize`): checkpoints hold
    float weights, which such layers store as integer codes and scales (reading or writing them would be silently
    wrong). `what` names the operation in the message."""
    from keras_vit.layers.quantized_sublayers import quantization_summary

    quantized = quantization_summary(model)
    if quantized:
        raise CheckpointError(f"{what} works on float models; {quantized}. Use the float model, and quantise it "
                              "after loading or saving.")


def variant_of(model):
    """Returns the builder name ("ViTB16", "ViTR50B16") whose configuration the model has, or None."""
    from keras_vit.models.variants import find_variant

    d = describe(model)
    if int(model.input_shape[-1]) != 3:
        return None
    return find_variant(d["patch_size"], d["hidden_size"], d["num_layers"], d["num_heads"], d["mlp_dim"],
                        resnet_num_layers(model))


def _block_variables(block):
    a = block.attention
    return {
        f"{LN1}/scale": block.norm_1.gamma, f"{LN1}/bias": block.norm_1.beta,
        f"{ATTENTION}/query/kernel": a.query_dense.kernel, f"{ATTENTION}/query/bias": a.query_dense.bias,
        f"{ATTENTION}/key/kernel": a.key_dense.kernel, f"{ATTENTION}/key/bias": a.key_dense.bias,
        f"{ATTENTION}/value/kernel": a.value_dense.kernel, f"{ATTENTION}/value/bias": a.value_dense.bias,
        f"{ATTENTION}/out/kernel": a.output_dense.kernel, f"{ATTENTION}/out/bias": a.output_dense.bias,
        f"{LN2}/scale": block.norm_2.gamma, f"{LN2}/bias": block.norm_2.beta,
        f"{MLP}/Dense_0/kernel": block.mlp_dense_1.kernel, f"{MLP}/Dense_0/bias": block.mlp_dense_1.bias,
        f"{MLP}/Dense_1/kernel": block.mlp_dense_2.kernel, f"{MLP}/Dense_1/bias": block.mlp_dense_2.bias,
    }


def model_variables(model):
    """Maps canonical (Google pre-linen) names to the model's variables, except the position embedding.

    The patch projection kernel is listed under "embedding/kernel" with the
    model's (P * P * C, D) shape.
    """
    d = describe(model)
    enc = d["encoder"]
    out = _resnet_variables(model)
    out.update({"embedding/kernel": enc.projection.kernel, "embedding/bias": enc.projection.bias})
    if d["class_token"]:
        out["cls"] = enc.cls
    if d["distillation_token"]:
        out["dist"] = enc.dist
    for i, block in enumerate(d["blocks"]):
        out.update({f"{BLOCK.format(i)}/{k}": v for k, v in _block_variables(block).items()})
    out["Transformer/encoder_norm/scale"] = d["encoder_norm"].gamma
    out["Transformer/encoder_norm/bias"] = d["encoder_norm"].beta
    for name, layer in (("pre_logits", d["pre_logits"]), ("head", d["head"])):
        if layer is not None:
            out[f"{name}/kernel"], out[f"{name}/bias"] = layer.kernel, layer.bias
    if d["distillation_token"] and d["head"] is not None:  # keras_vit.layers.DistilledHead
        out["head_dist/kernel"], out["head_dist/bias"] = d["head"].distillation_kernel, d["head"].distillation_bias
    return out


def _resnet_variables(model):
    """The hybrid's ResNet variables under Google's names (`block1_unit1_conv1` -> `block1/unit1/conv1/kernel`)."""
    import keras

    from keras_vit.layers import StdConv2D

    out = {}
    for layer in model.layers:
        m = re.fullmatch(r"(conv_root|gn_root)|(block\d+)_(unit\d+)_((?:conv|gn)(?:\d|_proj))", layer.name)
        if not m:
            continue
        name = m.group(1) or f"{m.group(2)}/{m.group(3)}/{m.group(4)}"
        if isinstance(layer, StdConv2D):
            out[f"{name}/kernel"] = layer.kernel
        elif isinstance(layer, keras.layers.GroupNormalization):
            out[f"{name}/scale"], out[f"{name}/bias"] = layer.gamma, layer.beta
    return out


def stage_units(names, pattern):
    """Units per stage, (3, 4, 9), from names matching `pattern` (groups: stage, unit, both 1-based); None if none."""
    units = {}
    for name in names:
        if m := re.match(pattern, name):
            units[int(m.group(1))] = max(units.get(int(m.group(1)), 0), int(m.group(2)))
    return tuple(units[s] for s in sorted(units)) or None


def resnet_num_layers(model):
    """The hybrid's units per ResNet stage, e.g. (3, 4, 9), or None for a pure ViT."""
    return stage_units((layer.name for layer in model.layers), r"block(\d+)_unit(\d+)_conv1$")


def cell_size(model):
    """Pixels per patch side of a keras_vit ViT: its `patches` layer's `patch_size`, times the hybrid ResNet's
    output stride (paper Sec. 3.1); image sizes are multiples of it. `model` has a layer named "patches"."""
    from keras_vit.models.resnet import output_stride

    stages = resnet_num_layers(model)
    return model.get_layer("patches").patch_size * (output_stride(stages) if stages else 1)


def _resolve_source(model, checkpoint, cache_dir):
    """Returns (arrays, description, registry entry or None)."""
    from keras_vit.weights import registry

    if isinstance(checkpoint, registry.Checkpoint):
        return layouts.read_checkpoint(registry.fetch(checkpoint, cache_dir)), checkpoint.name, checkpoint
    if isinstance(checkpoint, dict):
        return layouts.as_float_arrays(checkpoint), "arrays", None
    if isinstance(checkpoint, str) and (checkpoint in registry.DEFAULTS or checkpoint in registry.CHECKPOINTS):
        entry = registry.resolve(checkpoint, variant_of(model))
        return layouts.read_checkpoint(registry.fetch(entry, cache_dir)), entry.name, entry
    if isinstance(checkpoint, (str, os.PathLike)):
        return layouts.read_checkpoint(checkpoint), os.fspath(checkpoint), None
    raise CheckpointError(
        "`checkpoint` must be a file path (.npz, .safetensors), a checkpoint name ('imagenet', 'imagenet21k', "
        f"or a key of keras_vit.weights.CHECKPOINTS) or a dict of arrays. Received: {type(checkpoint).__name__}"
    )


def _square_side(n):
    """The side of a square grid of `n` cells (n >= 1), or None."""
    side = math.isqrt(n) if n >= 1 else 0
    return side if side >= 1 and side * side == n else None


def read_position_table(length, class_token, model_grid=None, source_grid=None):
    """Reads a position-embedding table of `length` rows: is there a class-token row, and which patch grid?

    Two layouts are in the wild for models with a class token. Google's
    original code (google-research/vision_transformer `models_vit.py`),
    Hugging Face's ViT and keras_vit prepend the class token and then add
    a table with a row for it: length = 1 + rows * cols. big_vision's
    `vit.py` (since 2022) and timm's `no_embed_class=True` models (DeiT III,
    FlexiViT) add the table to the patches and then prepend the class
    token: length = rows * cols, no class-token row. The file does not say
    which, so it is read from the count, in this order:

    1. `source_grid` (rows, cols), when given: its cells are length - 1 (a
       class-token row) or length (none).
    2. The model's grid, exactly: its cells = length - 1, else = length.
    3. A square grid: length - 1 a square (big_vision's own rule in
       `fix_old_checkpoints`), else length a square.

    Args:
        length: int >= 1, rows of the table.
        class_token: bool, the checkpoint has a class token (`cls`).
        model_grid: (rows, cols) of the model, or None.
        source_grid: (rows, cols) of the checkpoint as the caller gave it, or None.

    Returns:
        (has_class_row, (rows, cols), other) where `other` is None, or the
        (has_class_row, grid) of a second reading that also fits (rules 2
        and 3 disagree), to be reported.

    Raises:
        CheckpointError: `source_grid` malformed or fitting neither reading
            (named with its value), or no reading fits (the message says
            what to pass).

    Example:

    >>> read_position_table(197, class_token=True)  # Google's B/16 at 224 px
    (True, (14, 14), None)
    >>> read_position_table(196, class_token=True)  # timm's no_embed_class, big_vision
    (False, (14, 14), None)
    >>> read_position_table(9, class_token=True, model_grid=(2, 4))
    (True, (2, 4), (False, (3, 3)))
    """
    if source_grid is not None:
        grid = tuple(source_grid) if isinstance(source_grid, (tuple, list, np.ndarray)) else (source_grid,)
        if len(grid) != 2 or not all(is_int(g) and g > 0 for g in grid):
            raise CheckpointError(
                f"`source_grid` must be (rows, cols) of positive ints. Received: source_grid={source_grid!r}"
            )
        grid = (int(grid[0]), int(grid[1]))
        cells = grid[0] * grid[1]
        if class_token and cells == length - 1:
            return True, grid, None
        if cells == length:
            return False, grid, None
        fits = f"{length - 1} (after a class-token row) or {length} (without one)" if class_token else f"{length}"
        raise CheckpointError(
            f"Checkpoint key {POS!r} has {length} rows, which hold {fits} patches; `source_grid` has {cells}. "
            f"Received: source_grid={source_grid!r}"
        )
    readings = []  # (has_class_row, grid), most likely first
    offsets = (1, 0) if class_token else (0,)
    if model_grid is not None:
        readings += [(k == 1, tuple(model_grid)) for k in offsets if length - k == model_grid[0] * model_grid[1]]
    for k in offsets:
        side = _square_side(length - k)
        if side is not None and (k == 1, (side, side)) not in readings:
            readings.append((k == 1, (side, side)))
    if not readings:
        if class_token:
            fits = f"neither {length - 1} patches after a class-token row nor {length} patches without one make"
        else:
            fits = f"its {length} patches do not make"
        grid_text = f"the model's {model_grid[0]}x{model_grid[1]} grid or " if model_grid is not None else ""
        raise CheckpointError(
            f"Checkpoint key {POS!r} has {length} rows: {fits} {grid_text}a square grid; "
            "pass `source_grid=(rows, cols)`, the checkpoint's patch grid"
        )
    other = next((r for r in readings[1:] if r[0] != readings[0][0]), None)
    return readings[0][0], readings[0][1], other


def load_pretrained(
    model, checkpoint, head="auto", interpolation="bilinear", antialias=False, source_grid=None, cache_dir=None
):
    """Loads a ViT checkpoint into a keras_vit model, all or nothing.

    Reads Google's `.npz` files (original, AugReg and big_vision layouts,
    scanned or not, with `opt/target/` or `params/` prefixes), Hugging Face
    and timm `.safetensors` files (see `keras_vit.weights.layouts`). Every
    array is checked against the model before the first one is assigned: a
    mismatch raises and leaves the model as it was.

    Position embeddings are resampled when the checkpoint's patch grid
    differs from the model's (paper Sec. 3.2; `resample_position_embedding`),
    with one logged message; the class-token row is kept. Whether the model
    has a class token is read from the checkpoint (a `cls` array), never
    guessed from the row count. A table without a class-token row beside a
    `cls` (timm's `no_embed_class` models, big_vision: positions are added
    before the class token is prepended) loads with a zero class-token row,
    which computes exactly the same, and one logged message; which layout a
    table has is read from its row count (`read_position_table`), or from
    `source_grid` when given.

    DeiT's distilled models (`distillation_token=True`; timm's `dist_token`
    and `head_dist`, Hugging Face's `DeiTForImageClassificationWithTeacher`)
    load into a model built with `distillation_token=True`: the distillation
    token, the table's two prefix rows (kept when resampled) and both heads,
    which load or are zeroed together.

    Heads (paper Sec. 3.2: the pre-trained head is removed and a
    zero-initialised one attached for fine-tuning):
        head="auto" (default): the checkpoint's head is loaded when its shape
            fits the model's; otherwise (other `classes`, no head in the
            file, or a head that is all zeros) the model's head is set to
            zeros and a message says why. `include_top=False` models have no
            head and the file's is reported as unused.
        head="load": the head must load; raises CheckpointError instead.
        head="reset": always zero the model's head (the "pretrained
            backbone" path) and say so.
    A `pre_logits` layer (Dense + tanh, `representation_size`) is loaded
    when the model has one; the file's is reported as unused when not.

    Messages go to the `keras_vit.weights` logger at WARNING level once the
    load has succeeded, and are returned in the report.

    Args:
        model: a model built by `keras_vit.VisionTransformer` or a variant
            builder (layer names `patches`, `patch_encoder`,
            `transformer_block_{i}`, `encoder_norm`, `pre_logits`,
            `predictions`).
        checkpoint: a path (.npz or .safetensors), "imagenet" /
            "imagenet21k" (for a model of a published variant), a key of
            `keras_vit.weights.CHECKPOINTS`, a `Checkpoint`, or a dict name ->
            array. Names are downloaded once with a SHA-256 check (`fetch`).
        head: "auto", "load" or "reset" (above).
        interpolation: "bilinear" (the reference code's, default) or "bicubic".
        antialias: bool, with "bicubic" only.
        source_grid: (rows, cols) of the checkpoint's patch grid, positive
            ints. Default: the model's grid when the checkpoint has as many
            patches (with or without a class-token row), else square.
        cache_dir: download cache root, default `~/.keras`.

    Returns:
        A `LoadReport`.

    Raises:
        CheckpointError (a ValueError): unreadable file; unknown layout; a
            tensor whose shape does not fit (the message names the key and
            both shapes); a missing key; a different number of layers; a
            class token in one but not the other; unknown extra parameters;
            a model whose position embedding is not "learned" (checkpoints
            hold the 1D learned table); a model quantised with
            `model.quantize` (load into the float model, then quantise);
            `head="load"` when the head cannot load.
        ValueError: a bad argument, an unknown checkpoint name, or a failed
            or corrupt download.
    """
    from keras_vit.common.validation import check_bool, check_choice
    from keras_vit.weights.resample import INTERPOLATIONS

    check_choice("head", head, HEAD_MODES)
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    check_bool("antialias", antialias)
    if antialias and interpolation != "bicubic":
        raise ValueError("`antialias=True` needs interpolation='bicubic' (the reference bilinear has no antialiasing)")
    d = describe(model)
    check_not_quantized(model, "load_pretrained")
    if d["position_embedding"] != "learned":
        raise CheckpointError(
            "Published ViT checkpoints hold the paper's learned 1D position embedding (position_embedding="
            f"'learned'); model {model.name!r} was built with position_embedding={d['position_embedding']!r}. "
            "Build the model with position_embedding='learned' to load them."
        )
    if head == "load" and d["head"] is None:
        raise CheckpointError("head='load' but the model has no head (include_top=False)")
    arrays, source, entry = _resolve_source(model, checkpoint, cache_dir)
    canon, layout = layouts.to_canonical(arrays, num_heads=d["num_heads"])
    report = LoadReport(layout=layout, loaded=[])
    variables = model_variables(model)
    values = {}

    def take(key, expected, transform=None):
        if key not in canon:
            raise CheckpointError(f"Checkpoint {source!r} is missing key {key!r} (model shape {tuple(expected)})")
        value = canon[key]
        if tuple(value.shape) != tuple(expected):
            raise CheckpointError(
                f"Checkpoint key {key!r} has shape {tuple(value.shape)}, the model needs {tuple(expected)}"
            )
        values[key] = value if transform is None else transform(value)

    n_ckpt = len({k.split("/")[1] for k in canon if k.startswith("Transformer/encoderblock_")})
    if n_ckpt != d["num_layers"]:
        raise CheckpointError(f"Checkpoint {source!r} has {n_ckpt} encoder blocks, the model has {d['num_layers']}")
    p, c, width = d["patch_size"], d["channels"], d["hidden_size"]
    take("embedding/kernel", (p, p, c, width), lambda v: v.reshape(p * p * c, width))
    has_cls = "cls" in canon
    if has_cls != d["class_token"]:
        raise CheckpointError(
            f"Checkpoint {source!r} {'has' if has_cls else 'has no'} class token ('cls'), "
            f"the model {'has' if d['class_token'] else 'has none'} (class_token={d['class_token']})"
        )
    has_dist = "dist" in canon
    if has_dist != d["distillation_token"]:
        raise CheckpointError(
            f"Checkpoint {source!r} {'has' if has_dist else 'has no'} distillation token (DeiT's 'dist_token'), "
            f"the model {'has' if d['distillation_token'] else 'has none'} "
            f"(distillation_token={d['distillation_token']}; build it with distillation_token={has_dist})"
        )
    for key, var in variables.items():
        if key in ("embedding/kernel",) or key.startswith(("head/", "head_dist/", "pre_logits/")):
            continue
        take(key, var.shape)

    # Position embeddings: with or without a class-token row; resample the grid when it differs (paper Sec. 3.2).
    if POS not in canon:
        raise CheckpointError(f"Checkpoint {source!r} is missing key {POS!r}")
    pos = canon[POS]
    if pos.ndim != 3 or pos.shape[0] != 1 or pos.shape[1] < 1 or pos.shape[2] != width:
        raise CheckpointError(f"Checkpoint key {POS!r} has shape {pos.shape}, the model needs (1, tokens, {width})")
    # DeiT's distilled tables always hold the distillation token's row after the class token's: read the rest
    class_row, old_grid, other = read_position_table(pos.shape[1] - has_dist, has_cls, d["grid"], source_grid)
    if has_dist and not class_row:
        raise CheckpointError(f"Checkpoint key {POS!r} has {pos.shape[1]} rows: a distilled (DeiT) table needs a row "
                              f"for the class token and one for the distillation token before the patches' "
                              f"{old_grid[0]}x{old_grid[1]}")
    prefix = int(class_row) + int(has_dist)
    if other is not None:
        report.say(
            f"Checkpoint key {POS!r}: read its {pos.shape[1]} rows as {_reading(class_row, old_grid)}; they "
            f"also fit {_reading(*other)} (pass source_grid=({other[1][0]}, {other[1][1]}) for that reading)"
        )
    resampled = pos
    if old_grid != tuple(d["grid"]):
        resampled = resample_position_embedding(pos, d["grid"], prefix, old_grid, interpolation, antialias)
        report.resampled = (old_grid, tuple(d["grid"]))
        kept = "; class and distillation token rows kept" if has_dist else "; class token row kept" if class_row else ""
        report.say(
            f"Resampled position embeddings from a {old_grid[0]}x{old_grid[1]} to a {d['grid'][0]}x{d['grid'][1]} "
            f"patch grid ({interpolation}{', antialiased' if antialias else ''}{kept})"
        )
    if has_cls and not class_row:
        # z_0 = [x_class; x_p E + E_pos] (timm no_embed_class, big_vision) equals keras_vit's
        # [x_class; x_p E] + [0; E_pos]: a zero class-token row computes exactly the same.
        resampled = np.concatenate([np.zeros((1, 1, width), np.float32), resampled], axis=1)
        report.say(
            f"Checkpoint key {POS!r} has no class-token row ({pos.shape[1]} rows for a {old_grid[0]}x{old_grid[1]} "
            "patch grid: positions added before the class token is prepended, as in timm's no_embed_class models "
            "and big_vision); loaded with a zero class-token row, which computes the same"
        )
    values[POS] = resampled

    # pre_logits (representation layer)
    if d["pre_logits"] is not None:
        take("pre_logits/kernel", variables["pre_logits/kernel"].shape)
        take("pre_logits/bias", variables["pre_logits/bias"].shape)
    elif "pre_logits/kernel" in canon:
        report.say("The checkpoint's pre_logits (representation) layer is unused: the model has none "
                   "(build it with representation_size to use it)")

    # Head
    has_head = "head/kernel" in canon
    zero = has_head and (not np.any(canon["head/kernel"]) and not np.any(canon["head/bias"]))
    heads = ("head", "head_dist") if d["distillation_token"] else ("head",)
    zero = zero or bool(entry is not None and entry.zero_head)
    if d["head"] is None:
        report.head = "none"
        if has_head:
            report.say("The checkpoint's head is unused: the model has no head (include_top=False)")
    else:
        kernel, bias = variables["head/kernel"], variables["head/bias"]
        reason = None
        if head == "reset":
            reason = "head='reset'"
        elif not has_head:
            reason = "the checkpoint has no head"
        elif d["distillation_token"] and "head_dist/kernel" not in canon:
            reason = "the checkpoint has no distillation head (a DeiT file with the class head only)"
        elif tuple(canon["head/kernel"].shape) != tuple(kernel.shape):
            reason = (f"the checkpoint's head has shape {tuple(canon['head/kernel'].shape)}, "
                      f"the model's {tuple(kernel.shape)} (classes={kernel.shape[1]})")
        elif zero:
            reason = "the checkpoint's head is all zeros (a pre-training checkpoint without a usable classifier)"
        elif "pre_logits/kernel" in canon and d["pre_logits"] is None:
            reason = "the checkpoint's head sits on its pre_logits layer, which the model lacks"
        if reason is not None and head == "load":
            raise CheckpointError(f"head='load' but the head cannot be loaded: {reason}")
        if reason is None:
            for name in heads:
                take(f"{name}/kernel", kernel.shape)
                take(f"{name}/bias", bias.shape)
            report.head = "loaded"
        else:
            for name in heads:
                values[f"{name}/kernel"] = np.zeros(kernel.shape, np.float32)
                values[f"{name}/bias"] = np.zeros(bias.shape, np.float32)
            report.head = "reset"
            report.say(f"Head re-initialised to zeros ({reason}); fine-tune it before use as a classifier")

    known = set(values) | {"pre_logits/kernel", "pre_logits/bias", "head/kernel", "head/bias", "head_dist/kernel",
                           "head_dist/bias"}
    unknown = sorted(set(canon) - known)
    if unknown:
        raise CheckpointError(
            f"Checkpoint {source!r} has parameters this model has no place for: {', '.join(unknown[:6])}"
            + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else "")
        )

    # Everything checked: assign.
    targets = dict(variables, **{POS: d["encoder"].position_embedding})
    for key, value in values.items():
        targets[key].assign(value.astype(targets[key].dtype))
    for message in report.messages:  # only once the load has succeeded
        LOG.warning(message)
    report.loaded = sorted(k for k in values if not (k.startswith(("head/", "head_dist/")) and report.head == "reset"))
    return report


def _reading(class_row, grid):
    return f"{'a class-token row and ' if class_row else 'no class-token row and '}a {grid[0]}x{grid[1]} patch grid"
