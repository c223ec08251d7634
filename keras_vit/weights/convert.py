"""Turn a ViT checkpoint into a Keras file for fast reuse: `keras-vit-convert` / `python -m keras_vit.weights.convert`.

Example (shell):

    keras-vit-convert ViT-B_16.npz vit_b16.weights.h5 --image-size 384
    keras-vit-convert model.safetensors vit.keras --classes 10 --head reset
"""

import os
import sys

from keras_vit.common import cli_text as _cli
from keras_vit.common import console as _console
from keras_vit.common.validation import check_bool, check_positive_int, parse_image_size
from keras_vit.weights.layouts import CheckpointError, read_checkpoint
from keras_vit.weights.checkpoint import infer_config
from keras_vit.weights.loader import load_pretrained

OUTPUTS = (".weights.h5", ".keras")
# convert()'s parameters -> keras-vit-convert's flags, for its error messages (keras_vit.common.cli_text.flag_names)
FLAGS = {"image_size": "--image-size", "classes": "--classes", "num_heads": "--num-heads", "head": "--head",
         "interpolation": "--interpolation", "antialias": "--antialias", "overwrite": "--overwrite",
         "include_top=False": "--no-top", "output": "OUTPUT", "source": "SOURCE"}


def _image_shape(image_size, config):
    if image_size is None:
        side = config["image_size"] or 224
        return side, side
    if isinstance(image_size, (tuple, list)) and len(image_size) == 2:
        return check_positive_int("image_size", image_size[0]), check_positive_int("image_size", image_size[1])
    side = check_positive_int("image_size", image_size)
    return side, side


def convert(
    source,
    output,
    image_size=None,
    include_top=True,
    classes=None,
    num_heads=None,
    head="auto",
    interpolation="bilinear",
    antialias=False,
    classifier_activation="softmax",
    overwrite=False,
    cache_dir=None,
):
    """Builds the model a checkpoint describes, loads it, and saves it as `.weights.h5` or `.keras`.

    The configuration (patch size, widths, layers, heads, representation
    size, class token, classes) is read from the checkpoint
    (`infer_config`); `image_size` may differ from the checkpoint's, in which
    case the position embeddings are resampled (paper Sec. 3.2). The output
    is written to a temporary file and moved into place.

    Args:
        source: checkpoint path (.npz, .safetensors) or a name known to
            `keras_vit.weights.CHECKPOINTS` (downloaded with a SHA-256 check).
        output: destination ending in ".weights.h5" (weights only; rebuild
            with the returned config) or ".keras" (whole model).
        image_size: None (the checkpoint's resolution, 224 when it cannot
            tell), an int (square) or (height, width), in pixels.
        include_top: bool, keep a classification head.
        classes: None (the checkpoint's head size, 1000 without one) or an
            int; a different number zero-initialises the head.
        num_heads: only for Hugging Face or timm files of a non-standard width.
        head, interpolation, antialias: as in `load_pretrained`.
        classifier_activation: head activation of the built model.
        overwrite: replace an existing `output`.
        cache_dir: download cache root for checkpoint names.

    Returns:
        (output path, config dict for `keras_vit.VisionTransformer`, LoadReport).

    Raises:
        CheckpointError / ValueError: unreadable or mismatched checkpoint, bad
            argument (named), output without a known extension.
        FileExistsError: `output` exists and `overwrite` is False.
    """
    from keras_vit.common.files import check_target, staged
    from keras_vit.models import VisionTransformer
    from keras_vit.weights import registry

    output = os.fspath(output)
    if not output.endswith(OUTPUTS):
        raise ValueError(f"`output` must end in '.weights.h5' or '.keras'. Received: output={output!r}")
    check_bool("include_top", include_top)
    check_bool("overwrite", overwrite)
    check_target(output, overwrite)
    if classes is not None:  # checks that need no checkpoint come before it is read (or downloaded)
        check_positive_int("classes", classes)
    if image_size is not None:
        _image_shape(image_size, {"image_size": None})
    if isinstance(source, str) and source in registry.CHECKPOINTS:
        source = registry.fetch(registry.CHECKPOINTS[source], cache_dir)
    arrays = read_checkpoint(source)
    config = infer_config(arrays, num_heads=num_heads)
    height, width = _image_shape(image_size, config)
    if classes is None:
        classes = config["classes"] or 1000
    classes = check_positive_int("classes", classes)
    build = {
        k: config[k]
        for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "representation_size",
                  "classifier", "class_token", "distillation_token", "resnet_num_layers", "resnet_width_factor")
        if k not in ("resnet_num_layers", "resnet_width_factor") or config["resnet_num_layers"]
    }
    build.update(include_top=include_top, classes=classes, input_shape=(height, width, config["channels"]),
                 classifier_activation=classifier_activation)
    model = VisionTransformer(**build)
    report = load_pretrained(model, arrays, head=head, interpolation=interpolation, antialias=antialias)
    with staged(output, overwrite) as tmp:
        if output.endswith(".keras"):
            model.save(tmp)
        else:
            model.save_weights(tmp)
    return output, build, report


def main(argv=None):
    """`keras-vit-convert`: exit 0 on success, 2 on bad input (message on stderr, no traceback)."""
    parser = _cli.ArgumentParser(  # "did you mean" on a mistyped flag or choice
        prog="keras-vit-convert",
        description="Convert a ViT checkpoint (Google .npz, Hugging Face or timm .safetensors) "
        "into a Keras .weights.h5 or .keras file.",
    )
    parser.add_argument("source", help="checkpoint file, or a name from keras_vit.weights.CHECKPOINTS")
    parser.add_argument("output", help="destination ending in .weights.h5 or .keras")
    parser.add_argument("--image-size", metavar="N|H,W", help="N, H,W or HxW pixels (default: the checkpoint's)")
    parser.add_argument("--classes", type=int, help="head size (default: the checkpoint's)")
    parser.add_argument("--no-top", action="store_true", help="leave out the classification head")
    parser.add_argument("--num-heads", type=int, help="attention heads, for PyTorch files of unusual width "
                        "(default: the published variant's for the checkpoint's width)")
    parser.add_argument("--head", choices=("auto", "load", "reset"), default="auto",
                        help="auto: the checkpoint's head where its shape fits, else a zero head; load: it must load; "
                        "reset: a zero head (default: auto)")
    parser.add_argument("--interpolation", choices=("bilinear", "bicubic"), default="bilinear",
                        help="how the position embeddings are resampled to another --image-size (default: bilinear)")
    parser.add_argument("--antialias", action="store_true", help="antialias that resampling (bicubic only)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT")
    _console.add_verbose_argument(parser)
    args = _cli.complete_help(parser).parse_args(argv)  # every flag's default in --help
    try:
        image_size = parse_image_size(args.image_size or None)  # N, H,W or HxW, as keras-vit-train and -export
    except ValueError as e:
        parser.error(str(e))
    _console.start(parser.prog, args.verbose)  # TensorFlow's start-up noise filtered, one line naming the devices
    try:
        output, config, report = convert(
            args.source, args.output, image_size=image_size, include_top=not args.no_top, classes=args.classes,
            num_heads=args.num_heads, head=args.head, interpolation=args.interpolation, antialias=args.antialias,
            overwrite=args.overwrite,
        )
    except (CheckpointError, ValueError, OSError) as e:  # OSError: FileExistsError, unwritable output
        print(f"keras-vit-convert: error: {_cli.flag_names(e, FLAGS)}", file=sys.stderr)
        return 2
    print(f"Wrote {output} ({report.layout} checkpoint, head {report.head})")
    print("Rebuild with: keras_vit.VisionTransformer(" + ", ".join(f"{k}={v!r}" for k, v in config.items()) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
