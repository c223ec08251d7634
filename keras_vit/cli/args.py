"""What `keras-vit-train` and `keras-vit-pretrain` share as command lines: the argument groups and the errors.

Their parsers are `keras_vit.common.cli_text.ArgumentParser` ("did you mean" for a
mistyped flag or choice) finished by `keras_vit.common.cli_text.complete_help` (every
flag's default in `--help`; a flag's own help text says it where the
default needs words, e.g. "default: every epoch"). `cli` runs a
command and turns a `ValueError` into one line and exit status 2, with the
Python parameter names of the library's messages (`num_heads`,
`directory=...`) replaced by the flags that set them (`--num-heads`,
`--image-folder ...`): `flag_names`. The argument groups both commands
take (`add_data_arguments` ... `add_output_arguments`) are here too.
"""

import argparse
import sys

from keras_vit.common import cli_text as _cli
from keras_vit.common.validation import parse_image_size

# Library parameters whose flag is not "--" + the name with dashes (keras_vit.data, the builders).
PARAMETER_FLAGS = {
    "directory": "--image-folder",
    "validation_split": "--validation-fraction",
    "data_dir": "--tfds-data-dir",
    "input_shape": "--image-size",
    "checkpoint": "--weights",
}


DEFAULTS = {
    "image_size": 16,
    "patch_size": 4,
    "hidden_size": 128,
    "num_layers": 4,
    "num_heads": 4,
    "mlp_dim": 512,
}


def _image_size(value):
    """argparse's type for --image-size: `(height, width)` from "N", "H,W" or "HxW"."""
    try:
        return parse_image_size(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--image-size must", "must").replace("--image-size ", "")) from None


def add_data_arguments(parser):
    """Adds the data flags that `keras-vit-train` and `keras-vit-pretrain` share; returns the group.

    One of --dataset digits, --image-folder DIR, --tfds NAME (default
    digits), with --tfds-data-dir, --train-split, --validation-split,
    --validation-fraction, --max-pixels and --augment. `load_data` reads them.
    """
    group = parser.add_argument_group("data (one of --dataset, --image-folder, --tfds)")
    src = group.add_mutually_exclusive_group()
    src.add_argument("--dataset", choices=["digits"], default=None, help="built-in data set (default: digits)")
    src.add_argument("--image-folder", metavar="DIR",
                     help="folder with one sub-folder of images per class (default: none, digits is read)")
    src.add_argument("--tfds", metavar="NAME", help="TensorFlow Datasets name, read from --tfds-data-dir (default: none)")
    group.add_argument("--tfds-data-dir", metavar="DIR", default=None,
                       help="TFDS data folder of --tfds (default: TFDS' own, ~/tensorflow_datasets)")
    group.add_argument("--train-split", default="train", help="TFDS training split (default: train)")
    group.add_argument("--validation-split", default="test", help="TFDS held-out split (default: test)")
    group.add_argument("--validation-fraction", type=float, default=0.2, help="held-out fraction of --image-folder")
    group.add_argument("--max-pixels", type=int, default=None, metavar="N",
                       help="refuse an --image-folder image of more pixels (width x height, read from its header "
                            "before decoding: decompression bombs) (default: PIL's limit, 89478485)")
    group.add_argument("--augment", choices=["none", "crop", "crop_flip", "affine"], default=None,
                       help="default: affine (small rotations and zooms) for digits, crop for other data")
    return group


def add_model_arguments(parser):
    """Adds the architecture flags (--variant, --image-size, --patch-size ... --stochastic-depth-rate); returns the group.

    Unset flags are None; `builder_config` fills in `DEFAULTS`.
    """
    from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS
    from keras_vit.models.variants import VARIANTS

    group = parser.add_argument_group("model")
    group.add_argument("--variant", choices=sorted(VARIANTS), default=None,
                       help="a ViT variant of the paper's Table 1 (default: none, the small ViT of the flags below)")
    group.add_argument("--image-size", type=_image_size, default=None, metavar="N|H,W",
                       help=f"input size in pixels, square N or H,W (default {DEFAULTS['image_size']}, 224 for "
                            "variants)")
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        group.add_argument("--" + name.replace("_", "-"), type=int, default=None, help=f"default {DEFAULTS[name]}")
    group.add_argument("--position-embedding", choices=POSITION_EMBEDDINGS, default=None,
                       help="position embeddings of the paper's Appendix D.4: learned (default, one 1D table), "
                       "learned_2d (X and Y tables), sincos_2d (fixed) or none")
    group.add_argument("--dropout-rate", type=float, default=None, help="default 0 (keras-vit-train: the --recipe's)")
    group.add_argument("--stochastic-depth-rate", type=float, default=None,
                       help="default 0 (keras-vit-train: the --recipe's)")
    return group


def rand_augment_flag(text):
    """`--rand-augment`'s type: "OPS,M" (e.g. "2,10") -> (2, 10.0); "none" -> "none" (off)."""
    if text.strip().lower() == "none":
        return "none"
    try:
        ops, magnitude = text.split(",")
        return int(ops), float(magnitude)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected OPS,M (e.g. 2,10: two operations of magnitude 10) or none, not {text!r}") from None


def add_recipe_arguments(parser):
    """Adds --recipe and the augmentation flags that override its settings one by one; returns the group.

    The recipes are `keras_vit.recipes.RECIPES`; a flag left out (None)
    takes the recipe's value (`keras_vit.recipes.recipe`). --label-smoothing,
    --dropout-rate and --stochastic-depth-rate are recipe settings too.
    """
    from keras_vit.recipes import RECIPES

    group = parser.add_argument_group("recipe (augmentation and regularisation; each flag overrides the recipe's)")
    group.add_argument("--recipe", choices=list(RECIPES), default="paper",
                       help="settings together: paper (geometric augmentation only), augreg-light/-medium/-heavy "
                       "(AugReg: RandAugment, Mixup, then dropout and stochastic depth), deit (RandAugment, Mixup, "
                       "CutMix, random erasing, label smoothing, stochastic depth), mixup-smoothing (Mixup 0.2 and "
                       "label smoothing 0.1 only: make demo's), deit-distill (mixup-smoothing's and DeiT's hard "
                       "distillation from --teacher, cnn by default); docs/recipes.md (default: paper)")
    group.add_argument("--rand-augment", type=rand_augment_flag, default=None, metavar="OPS,M|none",
                       help="Keras' RandAugment: OPS operations (1-11) of magnitude M (0-30, RandAugment's scale; "
                       "AugReg 10-20) per image (default: the recipe's)")
    group.add_argument("--mixup-alpha", type=float, default=None,
                       help="Keras' MixUp per batch, Beta(alpha, alpha), alpha in [0, 10]; 0 is off "
                       "(default: the recipe's)")
    group.add_argument("--cutmix-alpha", type=float, default=None,
                       help="Keras' CutMix per batch, alpha in [0, 1]; 0 is off; with --mixup-alpha each batch "
                       "gets one of the two (default: the recipe's)")
    group.add_argument("--random-erasing", type=float, default=None,
                       help="probability in [0, 1] of erasing a random rectangle of an image (Keras' "
                       "RandomErasing) (default: the recipe's)")
    group.add_argument("--label-smoothing", type=float, default=None, help="in [0, 1) (default: the recipe's)")
    return group


def add_training_arguments(parser, learning_rate):
    """Adds the flags of a `model.fit` run (length, learning rate, precision, strategy, XLA, backup); returns the group.

    --epochs, --batch-size, --learning-rate (default `learning_rate`),
    --warmup-epochs, --precision, --strategy, --tpu, --backup-dir,
    --backup-every, --xla / --no-xla and --seed; `keras_vit.train.check_run_args`
    and `keras_vit.cli.fit`'s `start_run` and `fit_with_backup` read them.
    """
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=int, default=100)
    group.add_argument("--batch-size", type=int, default=64)
    group.add_argument("--learning-rate", type=float, default=learning_rate, help=f"peak learning rate (default {learning_rate:g})")
    group.add_argument("--warmup-epochs", type=float, default=None, help="linear warm-up (default: 6%% of --epochs)")
    group.add_argument("--precision", choices=["float32", "mixed_bfloat16", "mixed_float16"], default="float32",
                       help="Keras dtype policy; the mixed ones compute in 16 bits and keep float32 weights, "
                       "mixed_float16 adds dynamic loss scaling (pure bfloat16/float16 weights are refused: most "
                       "updates round away)")
    group.add_argument("--strategy", choices=["default", "mirrored", "multi_worker", "tpu"], default="default",
                       help="tf.distribute strategy: one device, all local GPUs, workers from TF_CONFIG, or a TPU "
                       "(--batch-size is the global batch; TensorFlow backend only); see docs/scaling.md")
    group.add_argument("--tpu", default=None, help="TPU name or address for --strategy tpu (default: the local TPU)")
    group.add_argument("--backup-dir", default=None,
                       help="where a preempted run keeps its state to resume from (default: OUTPUT_DIR/backup); "
                       "the folder is deleted when training ends, so it must hold nothing else")
    group.add_argument("--backup-every", type=int, default=None,
                       help="back up every N steps (a resumed run restarts its epoch) (default: every epoch)")
    group.add_argument("--xla", choices=["auto", "on", "off"], default="auto",
                       help="compile the train step with XLA (jit_compile). auto: on, except for mixed_bfloat16 on "
                       "CPUs and for several CPU replicas, where it is slower or cannot compile, and under op "
                       "determinism (TF_DETERMINISTIC_OPS=1), where Keras turns XLA off; off on the PyTorch "
                       "backend, where jit_compile means torch.compile (on asks for it; slower to start)")
    group.add_argument("--no-xla", dest="xla", action="store_const", const="off", help="the same as --xla off (default: not given)")
    group.add_argument("--seed", type=int, default=0)
    return group


def add_output_arguments(parser, default_dir, what):
    """Adds --output-dir (default `default_dir`; `what` says what goes there), --overwrite and --verbose."""
    group = parser.add_argument_group("output")
    group.add_argument("--output-dir", default=default_dir, help=f"folder for {what}")
    group.add_argument("--overwrite", action="store_true", help="replace the files of an earlier run")
    group.add_argument("--verbose", type=int, choices=[0, 1, 2], default=1,
                       help="silent (0), Keras progress bar and the device line (1), one line per epoch and "
                       "TensorFlow's own log, unfiltered (2)")
    return group


def flag_names(message, parser):
    """`message` with the Python parameters that `parser`'s flags set written as those flags.

    "`hidden_size` must be divisible by `num_heads`. Received: hidden_size=128,
    num_heads=3" becomes "--hidden-size must be divisible by --num-heads.
    Received: --hidden-size 128, --num-heads 3". A parameter is a flag's
    `dest` or a key of `PARAMETER_FLAGS` (`directory` -> `--image-folder`);
    the rewriting is `keras_vit.common.cli_text.flag_names`'.
    """
    flags = {a.dest: a.option_strings[0] for a in parser._actions if a.option_strings and a.dest != "help"}
    flags.update(PARAMETER_FLAGS)
    return _cli.flag_names(message, flags)


def require_tensorflow(prog):
    """Exits with status 2 and one line naming the extra to install when TensorFlow is missing (the training
    command lines read their data through tf.data); call it before anything imports TensorFlow."""
    from keras_vit.common.backend import tensorflow

    try:
        tensorflow(f"{prog} (its input pipelines are tf.data)")
    except ImportError as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        sys.exit(2)


def cli(parser, argv, run_fn, summary):
    """Parses `argv`, runs `run_fn(args)` and prints `summary(args, metrics)`; returns 0.

    A ValueError (a bad flag, named in its message; `flag_names` writes the
    library's parameter names as flags) or a data file that TensorFlow
    cannot decode exits with status 2 and one line, no traceback. The
    global Keras dtype policy (set by --precision) is given back.
    """
    from keras_vit.common import console as _console

    args = parser.parse_args(argv)
    _console.start(parser.prog, args.verbose)  # TensorFlow's start-up noise filtered, one line naming the devices
    import keras

    previous_policy = keras.config.dtype_policy()  # --precision sets the global policy; callers get theirs back
    try:
        metrics = run_fn(args)
    except ValueError as e:
        parser.exit(2, f"{parser.prog}: error: {flag_names(str(e), parser)}\n")
    except Exception as e:  # a file of the data set that TensorFlow cannot decode
        if type(e).__name__ != "InvalidArgumentError":
            raise
        parser.exit(2, f"{parser.prog}: error: the data could not be read: {op_error_line(e)[:300]}\n")
    finally:
        keras.config.set_dtype_policy(previous_policy)
    print(summary(args, metrics))
    return 0


def op_error_line(error):
    """The line of a TensorFlow error that says what failed: in a "Graph execution error", the one before the op's
    `[[{{node ...}}]]` (e.g. "a bad record : Tensor had NaN values"), else the first."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    for before, line in zip(lines, lines[1:]):
        if line.startswith("[[") and not before.startswith(("[[", "File ")):
            return before
    return lines[0] if lines else type(error).__name__
