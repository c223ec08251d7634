"""`keras-vit-train`: train a ViT on a data set and write the model and metrics.

Run as `keras-vit-train [options]` or `python -m keras_vit.train`. The
default trains a small ViT (image 16, patch 4, 16 patches) on scikit-learn's `digits`
and writes to `--output-dir`:

    model.keras          the trained model (Keras format)
    history.json         per-epoch loss/accuracy, train and held-out
    metrics.json         held-out accuracy and loss, images_per_second and
                         wall_time_s of the held-out evaluation, training time
    training_curve.png   loss and accuracy per epoch
    backup/              while training: the state a preempted run resumes from
                         (keras.callbacks.BackupAndRestore); removed at the end

`--strategy` picks a tf.distribute strategy (docs/scaling.md); in a
multi-worker run only the chief writes these files.

Keras backends: the command runs under `KERAS_BACKEND=tensorflow` (the
default), `jax` or `torch`; its input pipelines are tf.data, so TensorFlow is
needed in every case. `--strategy` other than "default" is refused on JAX and
PyTorch (tf.distribute is TensorFlow's; on JAX, `keras.distribution.
DataParallel` from Python is the counterpart of "mirrored"), and `--xla auto`
trains without `jit_compile` on PyTorch (it means torch.compile there).

`--init-from MODEL.keras` fine-tunes a saved keras_vit model instead of
building one (paper Sec. 3.2): with `--image-size` at another resolution
(`keras_vit.resize`, the position embeddings resampled once), keeping its
head when its class count is the data's and otherwise putting a
zero-initialised head on its pooled features.

`--recipe NAME` sets augmentation and regularisation together
(`keras_vit.recipes`: paper, augreg-light, augreg-medium, augreg-heavy,
deit, mixup-smoothing); each of its settings is also a flag of its own (--rand-augment,
--mixup-alpha, --cutmix-alpha, --random-erasing, --label-smoothing,
--dropout-rate, --stochastic-depth-rate), which wins over the recipe.

`--labels-fraction F` trains on a stratified, seeded (`--seed`) share F of
the training split (`keras_vit.data.stratified_subset`: each class keeps
round(F x its count)); the held-out split is unchanged, and a fraction that
leaves a class with no image is refused (exit 2).

The argument groups (`keras_vit.cli.args`) and the run helpers here are
shared with `keras-vit-pretrain` (`keras_vit.pretrain`).

Each file is written to a temporary name in the same folder and moved into
place, so an interrupted run never leaves a half-written file under a final
name. An existing `model.keras` is kept unless `--overwrite` is given.
"""

import os
import sys
import time

from keras_vit.common import cli_text as _cli
from keras_vit.common import files as _files
from keras_vit.common.validation import check_image_size
from keras_vit.cli import init_from as _init_from
from keras_vit.cli import teacher as _teacher
from keras_vit.cli import train_weights as _train_weights
from keras_vit.cli.args import (  # noqa: F401 (DEFAULTS and the argument groups are keras_vit.train's names too)
    DEFAULTS,
    add_data_arguments,
    add_model_arguments,
    add_output_arguments,
    add_recipe_arguments,
    add_training_arguments,
    cli,
    require_tensorflow,
)
from keras_vit.common.backend import backend
from keras_vit.cli.fit import count_steps, fit_with_backup, run_metrics, start_run, timed_evaluate
from keras_vit.cli.run_files import (
    atomic_write,
    check_backup_dir,
    check_output_dir,
    check_resumable,
    plot_history,
    write_json,
)

def build_parser():
    """Returns the `argparse.ArgumentParser` of `keras-vit-train`."""
    p = _cli.ArgumentParser(
        prog="keras-vit-train",
        description="Train a Vision Transformer (arXiv:2010.11929) with model.fit and XLA.",
    )
    d = add_data_arguments(p)
    d.add_argument("--labels-fraction", type=float, default=1.0,
                   help="train on a stratified, seeded (--seed) share of the training split's labelled images, "
                   "in (0, 1] (default 1: all); each class keeps round(F x its count); the held-out split is "
                   "unchanged (keras_vit.data.stratified_subset)")
    m = add_model_arguments(p)
    m.add_argument("--init-from", metavar="MODEL.keras", default=None,
                   help="fine-tune a saved keras_vit model instead of building one (paper Sec. 3.2): --image-size "
                   "resizes it (keras_vit.resize: position embeddings resampled once; a model of any resolution is "
                   "kept as it is); its head is kept when its class count is the data's, else replaced by a "
                   "zero-initialised one (pre_logits dropped). The other model flags must not be given; "
                   "a keras-vit-pretrain backbone.keras fine-tunes this way (default: none, a new model)")
    m.add_argument("--weights", metavar="NAME|FILE", default=None,
                   help="fine-tune from a checkpoint (paper Sec. 3.2): imagenet21k or imagenet (with --variant), a key "
                   "of keras_vit.weights.CHECKPOINTS, or a local .npz / .safetensors file (its architecture read "
                   "from it); names download once to ~/.keras/models/keras_vit/. Its head is kept when its class "
                   "count is the data's, else zero-initialised; --image-size resamples the position embeddings "
                   "(default: none, random initialisation)")
    m.add_argument("--freeze-backbone", action="store_true",
                   help="train the head alone, every other layer frozen: a linear probe of --weights or --init-from "
                   "(default: off, everything trains)")
    t = add_training_arguments(p, learning_rate=2e-3)
    t.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    t.add_argument("--weight-decay", type=float, default=0.05, help="AdamW weight decay (0 for sgd)")
    t.add_argument("--ema-momentum", type=float, default=None, help="average the weights (e.g. 0.998); default: off")
    add_recipe_arguments(p)
    _teacher.add_teacher_arguments(p)
    add_output_arguments(p, "runs/train", "model.keras and the metrics")
    return _cli.complete_help(p)  # every flag's default in --help


_ARCHITECTURE_FLAGS = ("variant", "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim",
                       "position_embedding", "dropout_rate", "stochastic_depth_rate")


def builder_config(args):
    """Returns (builder kwargs, image_size) from the parsed arguments (image_size None: the --init-from model's)."""
    if getattr(args, "init_from", None) is not None:
        given = [k for k in _ARCHITECTURE_FLAGS if getattr(args, k) is not None]
        if given:
            raise ValueError(
                f"--init-from {args.init_from} takes the architecture of the saved model; drop "
                + ", ".join("--" + k.replace("_", "-") for k in given)
            )
        if not os.path.isfile(args.init_from):
            raise ValueError(f"--init-from {args.init_from!r}: no such file (give a model saved as .keras)")
        return {}, args.image_size
    _check_model_flags(args)
    explicit = {k: getattr(args, k) for k in DEFAULTS if k != "image_size" and getattr(args, k) is not None}
    if args.variant is not None:
        if explicit:
            raise ValueError(
                f"--variant {args.variant} fixes the architecture; drop "
                + ", ".join("--" + k.replace("_", "-") for k in explicit)
            )
        from keras_vit.models.variants import VARIANTS

        image_size = (224, 224) if args.image_size is None else args.image_size
        patch_size = VARIANTS[args.variant][1]
        return {}, check_image_size(image_size, patch_size, f"the patch size of --variant {args.variant}")
    config = {k: v for k, v in DEFAULTS.items() if k != "image_size"}
    config.update(explicit)
    image_size = (DEFAULTS["image_size"],) * 2 if args.image_size is None else args.image_size
    check_image_size(image_size, config["patch_size"], f"--patch-size {config['patch_size']}")
    if config["hidden_size"] % config["num_heads"]:
        raise ValueError(f"--hidden-size must be divisible by --num-heads. Received: --hidden-size "
                         f"{config['hidden_size']}, --num-heads {config['num_heads']}")
    return config, image_size


def _check_model_flags(args):
    """Raises ValueError naming the flag for an architecture flag out of range; before any data is read."""
    for name in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1. Received: {value}")
    for name in ("dropout_rate", "stochastic_depth_rate"):
        value = getattr(args, name, None)
        if value is not None and not 0 <= value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be in [0, 1). Received: {value}")


def _check_data_source_flags(args):
    """Raises ValueError naming a data flag that the chosen source would ignore (each was ignored silently).

    --train-split, --validation-split and --tfds-data-dir are --tfds's; --validation-fraction is --image-folder's
    (digits and TFDS data sets have a held-out split of their own), and so is --max-pixels. A flag left at its
    default passes.
    """
    tfds_flags = [f"{flag} {value}" for flag, value, default in (
        ("--train-split", args.train_split, "train"), ("--validation-split", args.validation_split, "test"),
        ("--tfds-data-dir", args.tfds_data_dir, None)) if value != default]
    if tfds_flags and not args.tfds:
        source = f"--image-folder {args.image_folder}" if args.image_folder else "the digits (the default data)"
        hint = ("; hold out a share of the folder with --validation-fraction (default 0.2)" if args.image_folder else
                "; train on a TFDS data set with --tfds NAME")
        raise ValueError(f"{', '.join(tfds_flags)}: {'these flags name' if len(tfds_flags) > 1 else 'this flag names'} "
                         f"--tfds splits or data, and the data is {source}{hint}")
    if args.max_pixels is not None and not args.image_folder:
        raise ValueError(f"--max-pixels {args.max_pixels} limits the images of --image-folder, and the data is "
                         f"{'--tfds ' + args.tfds if args.tfds else 'the digits'}")
    if args.validation_fraction != 0.2 and not args.image_folder:
        split = "--validation-split (a TFDS split name)" if args.tfds else "their fixed held-out split"
        raise ValueError(f"--validation-fraction {args.validation_fraction} holds out a share of --image-folder, and "
                         f"the data is {'--tfds ' + args.tfds if args.tfds else 'the digits'}: use {split}")


def load_data(args, image_size, batch_size, settings=None):
    """(training, held-out) pipelines of `keras_vit.data` for the data flags; --labels-fraction subsets the first.

    `settings` (a `keras_vit.recipes.recipe`) adds its RandAugment, random
    erasing, Mixup and CutMix to the training pipeline."""
    from keras_vit import data

    common = {"image_size": image_size, "batch_size": batch_size, "seed": args.seed}
    augment = args.augment or ("crop" if args.image_folder or args.tfds else "affine")
    augment = None if augment == "none" else augment
    fraction = getattr(args, "labels_fraction", 1.0)
    training = {"shuffle": True, "augment": augment, "labels_fraction": None if fraction == 1 else fraction}
    if settings is not None:
        training.update({k: settings[k] for k in ("rand_augment", "random_erasing", "mixup_alpha", "cutmix_alpha")})
    # keras_vit.data's errors name its parameters (labels_fraction=0.1 ...); the command line writes them as flags
    if args.image_folder:
        split = {"validation_split": args.validation_fraction, "directory": args.image_folder}
        if args.max_pixels is not None:
            split["max_pixels"] = args.max_pixels
        train = data.from_directory(subset="training", **training, **split, **common)
    elif args.tfds:
        tfds_args = {"data_dir": args.tfds_data_dir, **common}
        train = data.from_tfds(args.tfds, split=args.train_split, **training, **tfds_args)
    else:
        train = data.digits("train", **training, **common)
    if args.image_folder:
        val = data.from_directory(subset="validation", **split, **common)
    elif args.tfds:
        val = data.from_tfds(args.tfds, split=args.validation_split, **tfds_args)
    else:
        val = data.digits("validation", **common)
    return train, val


def _recipe_settings(args):
    """`keras_vit.recipes.recipe(--recipe)` with the flags given in its place; ValueErrors name the flags."""
    from keras_vit import recipes

    try:
        return recipes.recipe(args.recipe, **{key: getattr(args, key) for key in recipes.SETTINGS})
    except ValueError as error:
        if "`rand_augment`" not in str(error) or not isinstance(args.rand_augment, tuple):
            raise
        ops, magnitude = args.rand_augment
        raise ValueError(f"--rand-augment takes OPS,M: OPS operations in [1, 11], magnitude M in [0, 30] (AugReg "
                         f"uses 2,10 to 2,20), or none. Received: --rand-augment {ops},{magnitude:g}") from None


def _applied_settings(settings, args):
    """The recipe's settings as metrics.json records them: what the run applied (an --init-from model keeps its own
    dropout and stochastic depth: None there)."""
    applied = {k: list(v) if isinstance(v, tuple) else v for k, v in settings.items()}
    if args.init_from is not None:
        applied.update(dropout_rate=None, stochastic_depth_rate=None)
    return applied


def check_run_args(args, outputs):
    """Checks the data, training and output flags of a run before any work; returns the warm-up in epochs.

    Args:
        args: the parsed flags.
        outputs: the names of the files the run writes to --output-dir,
            the main one first; none may exist without --overwrite.

    Raises:
        ValueError: a flag out of range (named), an output folder that
            cannot be one, an existing output there without --overwrite, a
            backup folder that holds other files, or the backup of an
            interrupted run of another command (`check_resumable`).
    """
    for name in ("epochs", "batch_size"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 1. Received: {getattr(args, name)}")
    if not args.learning_rate > 0:
        raise ValueError(f"--learning-rate must be > 0. Received: {args.learning_rate}")
    if not 0 <= args.validation_fraction < 1 or (args.image_folder and args.validation_fraction == 0):
        raise ValueError(f"--validation-fraction must be in (0, 1). Received: {args.validation_fraction}")
    _check_data_source_flags(args)
    warmup_epochs = 0.06 * args.epochs if args.warmup_epochs is None else args.warmup_epochs
    if warmup_epochs < 0 or warmup_epochs >= args.epochs:
        raise ValueError(f"--warmup-epochs must be in [0, --epochs={args.epochs}). Received: {args.warmup_epochs}")
    from keras_vit.training import jax_cpu_lacks_float16

    if args.precision == "mixed_float16" and jax_cpu_lacks_float16():
        raise ValueError("--precision mixed_float16: JAX's CPU backend has no float16 matrix product (XLA:CPU); use "
                         "--precision mixed_bfloat16 or float32 here, a GPU, or another KERAS_BACKEND")
    if args.strategy != "default" and backend() != "tensorflow":
        raise ValueError(
            f"--strategy {args.strategy} is a tf.distribute strategy, which runs on the TensorFlow backend only "
            f"(KERAS_BACKEND={backend()} here). Train with KERAS_BACKEND=tensorflow, or on JAX distribute from "
            "Python with keras.distribution.DataParallel (README, 'Keras backends')")
    out = args.output_dir
    check_output_dir(out)
    existing = [name for name in outputs if os.path.exists(os.path.join(out, name))]
    if existing and not args.overwrite:  # another command's files too (keras-vit-pretrain's metrics.json)
        raise ValueError(f"{os.path.join(out, existing[0])} exists"
                         + (f" (and {', '.join(existing[1:])})" if existing[1:] else "")
                         + "; pass --overwrite to replace it, or give another --output-dir")
    if args.backup_every is not None and args.backup_every < 1:
        raise ValueError(f"--backup-every must be >= 1. Received: {args.backup_every}")
    if args.tpu is not None and args.strategy != "tpu":
        raise ValueError(f"--tpu applies to --strategy tpu only. Received: --strategy {args.strategy}")
    backup_dir = args.backup_dir or os.path.join(out, "backup")
    check_backup_dir(backup_dir, out)
    check_resumable(backup_dir, args)
    return warmup_epochs


def run(args):
    """Trains and evaluates as `args` say; returns the metrics dict.

    Raises:
        ValueError: a bad argument (names it), or an output folder that
            already holds a model while `args.overwrite` is False.
    """
    outputs = ("model.keras", "metrics.json", "history.json", "training_curve.png")
    trains_cnn = args.teacher == _teacher.CNN or (args.teacher is None and args.recipe == "deit-distill"
                                                  and args.distillation != "none")
    warmup_epochs = check_run_args(args, outputs + (("teacher.keras",) if trains_cnn else ()))
    if not 0 < args.labels_fraction <= 1:
        raise ValueError(f"--labels-fraction must be in (0, 1]. Received: {args.labels_fraction}")
    if args.freeze_backbone and args.weights is None and args.init_from is None:
        raise ValueError("--freeze-backbone trains the head alone on pre-trained features: give --weights or "
                         "--init-from")
    pretrained = None
    if args.weights is not None:  # checked, downloaded and read before the data
        pretrained = _train_weights.resolve(args)
        model_config, image_size = {}, pretrained.image_size
    else:
        model_config, image_size = builder_config(args)
    settings = _recipe_settings(args)  # after the model flags' own checks
    teacher, distillation = _teacher.resolve(args, settings, pretrained)
    settings["distillation"] = distillation  # what the run applies (metrics.json's recipe_settings)
    out = args.output_dir
    model_path = os.path.join(out, "model.keras")

    import numpy as np

    import keras_vit
    from keras_vit import distribute, training

    strategy, chief, run_jit = start_run(args)
    saved = None
    if args.init_from is not None:
        kept = [f"--{k.replace('_', '-')} {settings[k]}" for k in ("dropout_rate", "stochastic_depth_rate") if settings[k]]
        if kept:
            print(f"--init-from {args.init_from}: the saved model keeps its own dropout and stochastic depth; "
                  f"--recipe {args.recipe}'s {' and '.join(kept)} {'does' if len(kept) == 1 else 'do'} not apply "
                  "to it", file=sys.stderr)
        with strategy.scope():
            saved = _init_from.load_saved_model(args.init_from)
        image_size = _init_from.saved_image_size(saved, image_size, args.init_from)
    train, val = load_data(args, image_size, args.batch_size, settings)
    if args.strategy != "default":
        train, val = distribute.shard(train), distribute.shard(val)
    classes = len(train.class_names)
    if classes < 2:
        raise ValueError(f"the training data hold one class ({', '.join(train.class_names)}); a classifier needs at "
                         "least 2 (keras-vit-pretrain learns from images of one class)")
    common = {
        "input_shape": (*image_size, 3),
        "classes": classes,
        "classifier_activation": None,
        "dropout_rate": settings["dropout_rate"],
        "stochastic_depth_rate": settings["stochastic_depth_rate"],
        "position_embedding": args.position_embedding or "learned",
        **({"distillation_token": True} if teacher and pretrained is None else {}),
    }
    steps_per_epoch = count_steps(train)
    total_steps = args.epochs * steps_per_epoch
    with strategy.scope():  # model, optimizer and metrics live on the strategy's devices
        name = "vit_digits" if not (args.image_folder or args.tfds) else "vit"
        if saved is not None:
            model = _init_from.fine_tuning_model(saved, image_size, classes, args.precision)
        elif pretrained is not None:
            model = _train_weights.build(pretrained, common, name)
        elif args.variant:
            model = getattr(keras_vit, args.variant)(**common)
        else:
            model = keras_vit.VisionTransformer(name=name, **model_config, **common)
        if not keras_vit.layers.set_model_class_names(model, list(train.class_names)):  # into the .keras file
            print("the model's head is a plain Dense layer (saved before keras_vit kept class names): the class names "
                  "go to metrics.json only; pass keras-vit-export --labels")
        if args.freeze_backbone:
            _train_weights.freeze_backbone(model)

        def compile_fn(trained, steps, warmup_steps, ema_momentum=None, from_logits=True, jit_compile=None):
            training.compile_model(trained, total_steps=steps, optimizer=args.optimizer,
                                   learning_rate=args.learning_rate, warmup_steps=warmup_steps,
                                   weight_decay=args.weight_decay, label_smoothing=settings["label_smoothing"],
                                   ema_momentum=ema_momentum, from_logits=from_logits,
                                   jit_compile=run_jit if jit_compile is None else jit_compile)

        trainer, teacher_metrics = model, {}
        if teacher is not None:  # DeiT: the student trains against the frozen teacher (keras_vit.distillation)
            from keras_vit.distillation import Distiller

            teacher_net, teacher_metrics = _teacher.teacher_model(  # a teacher file that does not fit: refused
                teacher, args, train, val, model, compile_fn,
                lambda cnn: chief and atomic_write(os.path.join(out, "teacher.keras"), cnn.save))
            trainer = Distiller(model, teacher_net, distillation=distillation, temperature=_teacher.temperature(args))
            print(f"training the student ({model.name}, with a distillation token) for {args.epochs} epoch"
                  f"{'s' if args.epochs != 1 else ''} against the teacher ({distillation} distillation)", flush=True)
        # the head's activation says logits or not; a Distiller's call gives the two heads' logits
        compile_fn(trainer, total_steps, int(warmup_epochs * steps_per_epoch), args.ema_momentum,
                   from_logits=None if trainer is model else True)
    hist, train_time = fit_with_backup(trainer, train, val, args, strategy, chief)
    results, eval_time = timed_evaluate(trainer, val)
    num_val = sum(int(y.shape[0]) for _, y in val)
    num_train = train.num_examples or steps_per_epoch * args.batch_size
    metrics = {
        **run_metrics(results, eval_time, num_val, train_time, num_train, args, trainer, strategy),
        "parameters": int(model.count_params()),  # the student's alone
        **teacher_metrics,
        "distillation": distillation,
        "temperature": _teacher.temperature(args) if distillation == "soft" else None,  # soft distillation's T
        "class_names": list(train.class_names),
        "init_from": args.init_from,
        "weights": args.weights,
        "freeze_backbone": args.freeze_backbone,
        "trainable_parameters": int(sum(int(np.prod(w.shape)) for w in model.trainable_weights)),
        "labels_fraction": args.labels_fraction,
        "num_train_images": num_train,
        "recipe": args.recipe,
        "recipe_settings": _applied_settings(settings, args),
    }
    if not chief:
        return metrics
    with _files.sigterm_deferred():  # a SIGTERM here waits: never a model.keras without its metrics
        atomic_write(model_path, model.save)
        write_json(os.path.join(out, "history.json"), hist)
        write_json(os.path.join(out, "metrics.json"), metrics)
        plot_history(os.path.join(out, "training_curve.png"), hist)
    return metrics


def main(argv=None):
    """Console entry point; returns the process exit code (0 ok, 2 bad input; 143 after a SIGTERM).

    A SIGTERM removes the temporary files of what was being written and ends
    the process with status 143 (`keras_vit.common.files.exit_on_sigterm`); the
    backup folder stays, and a rerun resumes from it.
    """
    with _files.exit_on_sigterm():
        return _main(argv)


def _teacher_time(metrics):
    """The summary's note on a CNN teacher trained by the run: its time is not in the student's."""
    seconds = metrics.get("teacher_train_seconds")
    return "" if seconds is None else f" (the student; the teacher's {seconds:.0f} s before it)"


def _main(argv):
    require_tensorflow("keras-vit-train")

    def summary(args, metrics):
        return (
            f"held-out accuracy {metrics['accuracy']:.4f}, loss {metrics['loss']:.4f}"
            f"{' (the label and distillation terms)' if metrics.get('teacher') else ''}, "
            f"{metrics['images_per_second']:.0f} images/s; training took {metrics['train_wall_time_s']:.0f} s"
            f"{_teacher_time(metrics)}; "
            f"wrote {args.output_dir}/model.keras, metrics.json, history.json, training_curve.png"
            f"{', teacher.keras' if metrics.get('teacher_epochs') else ''}"
        )

    return cli(build_parser(), argv, run, summary)


if __name__ == "__main__":
    sys.exit(main())
