"""`keras-vit-train --weights NAME|FILE` and `--freeze-backbone`: fine-tuning from a checkpoint (paper Sec. 3.2).

`--weights` takes a published checkpoint ("imagenet21k", "imagenet", or a
key of `keras_vit.weights.CHECKPOINTS`, with `--variant` where the name does
not fix one) or a local `.npz` / `.safetensors` file, whose architecture is
read from the file (`keras_vit.weights.infer_config`). The model is built
for the data's classes and loaded with `keras_vit.weights.load_pretrained`
(head="auto"): the checkpoint's head is kept when its class count is the
data's, otherwise a zero-initialised head is put in its place; the position
embeddings are resampled once when `--image-size` is not the checkpoint's
resolution. `--freeze-backbone` then trains the head alone (a linear probe).

Everything that needs no data (the name, the variant, the image size, the
download, reading the file) is checked by `resolve`, before the data are
read; errors are ValueErrors naming the flag, so the command exits 2. A
download that fails (no network) says where to put the file by hand.
"""

import dataclasses
import os
import re

from keras_vit.common import cli_text as _cli
from keras_vit.common.validation import check_image_size, parse_image_size

WEIGHT_FILES = (".npz", ".safetensors")
_FILE_FIXES = ("variant", "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")


@dataclasses.dataclass
class Pretrained:
    """What `--weights` resolved to, before any data are read.

    Attributes:
        path: the local checkpoint file (downloaded and checked for a name).
        source: the name or file as given, for messages and metrics.
        variant: the builder name (e.g. "ViTTi16") for a published variant, or None.
        config: `keras_vit.VisionTransformer` arguments read from a local file (None with `variant`).
        image_size: (height, width), the training resolution in pixels.
    """

    path: str
    source: str
    variant: object
    config: object
    image_size: tuple


def resolve(args):
    """Checks `--weights` with the model flags and fetches or reads the checkpoint; returns a `Pretrained`.

    Args:
        args: keras-vit-train's parsed flags (`weights`, `init_from`,
            `variant`, `image_size`, the architecture flags).

    Raises:
        ValueError: --weights with --init-from; an unknown name (with the
            closest one) or a missing file; a name without --variant where
            it needs one, or of another variant; architecture flags that the
            checkpoint fixes; --position-embedding other than learned; an
            --image-size that is not a multiple of the patch size; a failed
            download (the message names the cache file to put by hand, or
            says to pass a path); a file that load_pretrained cannot read.
    """
    from keras_vit.weights import registry

    weights = args.weights
    if args.init_from is not None:
        raise ValueError(f"--weights {weights} and --init-from {args.init_from} both give the starting weights; "
                         "pass one of them")
    if args.position_embedding not in (None, "learned"):
        raise ValueError(f"--weights {weights}: checkpoints hold learned 1D position embeddings; drop "
                         f"--position-embedding {args.position_embedding} (or give learned)")
    if weights in registry.DEFAULTS or weights in registry.CHECKPOINTS:
        return _published(args, registry)
    if not weights.lower().endswith(WEIGHT_FILES) and not os.path.isfile(weights):
        names = [*registry.DEFAULTS, *registry.CHECKPOINTS]
        raise ValueError(f"--weights {weights!r} is neither a checkpoint name ({', '.join(registry.DEFAULTS)} or a key "
                         f"of keras_vit.weights.CHECKPOINTS) nor a .npz or .safetensors file"
                         + _cli.suggestion(weights, names))
    return _local(args)


def _published(args, registry):
    weights = args.weights
    given = [k for k in _FILE_FIXES[1:] if getattr(args, k) is not None]
    if given:
        raise ValueError(f"--weights {weights} fixes the architecture; drop "
                         + ", ".join("--" + k.replace("_", "-") for k in given))
    if weights in registry.DEFAULTS and args.variant is None:
        raise ValueError(f"--weights {weights} needs --variant, one of {', '.join(sorted(registry.DEFAULTS[weights]))}")
    variant = args.variant or registry.CHECKPOINTS[weights].variant
    try:
        entry = registry.resolve(weights, variant)
    except ValueError as e:
        raise ValueError(f"--weights {weights} --variant {variant}: {e}") from None
    image_size = _image_size(args, entry.image_size, _patch_size(variant), weights)
    try:
        path = registry.fetch(entry)
    except ValueError as e:
        if not str(e).startswith("Download of"):
            raise ValueError(f"--weights {weights}: {e}") from None
        expected = registry.cache_path(entry)
        reason = " ".join(str(e).split(" failed: ", 1)[-1].split())[:200]
        raise ValueError(
            f"--weights {weights}: the checkpoint {entry.name} could not be downloaded from {entry.url} ({reason}). "
            f"To work offline, put that file in the folder {os.path.dirname(expected)} as "
            f"{os.path.basename(expected)} (it is used from there without a download), or pass the path of a "
            "local .npz or .safetensors file: --weights PATH"
        ) from None
    return Pretrained(path, weights, variant, None, image_size)


def _patch_size(variant):
    """Pixels per patch side of a variant builder, the number its name ends in (ViTTi16: 16; ViTR50B16: 16, the
    ResNet's stride 16 x 1-pixel patches)."""
    return int(re.search(r"\d+$", variant).group())


def _local(args):
    from keras_vit.weights import CheckpointError, infer_config, read_checkpoint

    path = args.weights
    if not os.path.isfile(path):
        raise ValueError(f"--weights {path!r}: no such file (give a .npz or .safetensors checkpoint, or a name)")
    try:
        config = infer_config(read_checkpoint(path))
    except (CheckpointError, OSError, ValueError) as e:
        raise ValueError(f"--weights {path!r} could not be read as a checkpoint: {e}") from None
    if config["channels"] != 3:
        raise ValueError(f"--weights {path!r} takes {config['channels']}-channel images; keras-vit-train's are RGB (3)")
    if args.variant is not None:
        given = [k for k in _FILE_FIXES[1:] if getattr(args, k) is not None]
        if given:
            raise ValueError(f"--variant {args.variant} fixes the architecture; drop "
                             + ", ".join("--" + k.replace("_", "-") for k in given))
        return Pretrained(path, path, args.variant, None,
                          _image_size(args, config["image_size"], _patch_size(args.variant), path))
    given = [k for k in _FILE_FIXES if getattr(args, k) is not None]
    if given:
        raise ValueError(f"--weights {path} takes the architecture of the checkpoint; drop "
                         + ", ".join("--" + k.replace("_", "-") for k in given))
    build = {k: config[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim",
                                    "representation_size", "classifier", "class_token", "distillation_token")}
    if config["resnet_num_layers"]:
        build.update(resnet_num_layers=config["resnet_num_layers"], resnet_width_factor=config["resnet_width_factor"])
    from keras_vit.models.resnet import output_stride

    cell = config["patch_size"] * (output_stride(config["resnet_num_layers"]) if config["resnet_num_layers"] else 1)
    return Pretrained(path, path, None, build, _image_size(args, config["image_size"], cell, path))


def _image_size(args, checkpoint_size, cell, source):
    """--image-size, else the checkpoint's resolution; a multiple of `cell` (the patch size, times a ResNet's stride)."""
    size = args.image_size if args.image_size is not None else checkpoint_size
    if size is None:
        raise ValueError(f"--weights {source}: its position table is not square, so its resolution is not known; "
                         "give --image-size")
    return check_image_size(parse_image_size(size), cell, f"the patch size of --weights {source}")


def build(pretrained, common, name):
    """Builds the model for the data and loads `pretrained` into it; prints what was loaded in one line.

    Args:
        pretrained: a `Pretrained`.
        common: the builder arguments of the run (input_shape, classes,
            classifier_activation, dropout and stochastic-depth rates,
            position_embedding).
        name: the model's name for a local file's configuration.

    Returns:
        The `keras.Model`, its head the checkpoint's when the class counts
        match, else zero-initialised (load_pretrained's head="auto").
    """
    import keras_vit
    from keras_vit.weights import load_pretrained

    if pretrained.variant is not None:
        model = getattr(keras_vit, pretrained.variant)(**common)
    else:
        model = keras_vit.VisionTransformer(name=name, **pretrained.config, **common)
    report = load_pretrained(model, pretrained.path, head="auto")
    grid = "" if report.resampled is None else (
        "; position embeddings resampled from a {0[0]}x{0[1]} to a {1[0]}x{1[1]} patch grid".format(*report.resampled))
    head = {"loaded": "its head kept (the data have its classes)",
            "reset": f"a zero-initialised head of {common['classes']} classes"}.get(report.head, "no head")
    print(f"--weights: {pretrained.source} ({report.layout} layout) loaded into {model.name}: {len(report.loaded)} "
          f"arrays, {head}{grid}")
    return model


def freeze_backbone(model):
    """Makes every layer but the head ("predictions") non-trainable (a linear probe); prints the counts.

    Raises:
        ValueError: the model has no "predictions" layer.
    """
    import numpy as np

    names = [layer.name for layer in model.layers]
    if "predictions" not in names:
        raise ValueError("--freeze-backbone trains the head alone, and the model has none")
    for layer in model.layers:
        layer.trainable = layer.name == "predictions"
    trainable = int(sum(np.prod(w.shape) for w in model.trainable_weights))
    print(f"--freeze-backbone: training the head alone, {trainable:,d} of {model.count_params():,d} parameters "
          "(a linear probe)")
    return trainable
