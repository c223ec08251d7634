"""`keras-vit-pretrain`: self-supervised masked patch prediction, then a backbone to fine-tune.

The paper's Sec. 4.6 and Appendix B.1.2 (arXiv:2010.11929): half of each
image's patch embeddings are corrupted (80% replaced by a learnable [mask]
embedding, 10% by another patch's, 10% left as they are) and the model
predicts, from each corrupted patch's final representation, its 3-bit mean
colour (512 classes for RGB; cross-entropy), or its 4x4 downsized pixels or
all its pixels (mean squared error). The labels of the data are ignored.
Run as `keras-vit-pretrain [options]` or `python -m keras_vit.pretrain`.

It takes keras-vit-train's data, model and training flags (the same argument
groups, `keras_vit.train`), plus `--target` and `--corruption-rate`, and
writes to `--output-dir`:

    backbone.keras           the pre-trained encoder: a plain keras_vit model
                             (include_top=False, pooling="token": one feature
                             vector per image, which keras-vit-export takes;
                             no [mask] embedding, no prediction head) for
                             `keras-vit-train --init-from`, which adds a
                             zero-initialised head
    pretraining.weights.h5   every weight of the pre-training model (backbone,
                             [mask] embedding, prediction head), for
                             `MaskedPatchPrediction(backbone, target).load_weights`
                             (figures of the predictions, or more pre-training)
    metrics.json             held-out pre-training loss, mean-colour accuracy
                             over the corrupted patches (target mean_color),
                             images_per_second and wall_time_s of the held-out
                             evaluation, training time, and the flags
    history.json             per-epoch loss (and accuracy), train and held-out
    loss_curve.png           those curves
    backup/                  while training: the state a preempted run resumes
                             from; removed at the end

The held-out images are the same as keras-vit-train's (digits: the fixed
20% split), corrupted once with the seed `--seed + 1` and kept in memory
(images, masks, targets), so that every epoch and the final evaluation
score the same corruption in every run: a held-out split must fit in memory
(e.g. `--validation-split "validation[:10000]"` for a large TFDS set). The
training images get new masks each epoch (`--seed`). Files are written to a temporary
name and moved into place; an existing `backbone.keras` is kept unless
`--overwrite` is given. A SIGTERM removes the temporary files and exits 143.
"""

import os
import sys

from keras_vit.common import cli_text as _cli
from keras_vit.common import files as _files
from keras_vit.cli.args import (
    add_data_arguments,
    add_model_arguments,
    add_output_arguments,
    add_training_arguments,
    cli,
    require_tensorflow,
)
from keras_vit.cli.run_files import atomic_write, plot_history, write_json
from keras_vit.cli.fit import count_steps, fit_with_backup, run_metrics, start_run, timed_evaluate
from keras_vit.train import builder_config, check_run_args, load_data

# Appendix B.1.2: "Adam, with a base learning rate of 2e-4, warmup of 10k steps and cosine learning rate decay".
LEARNING_RATE = 2e-4


def build_parser():
    """Returns the `argparse.ArgumentParser` of `keras-vit-pretrain`."""
    from keras_vit.pretraining import TARGETS

    p = _cli.ArgumentParser(
        prog="keras-vit-pretrain",
        description="Pre-train a Vision Transformer's encoder by masked patch prediction (arXiv:2010.11929, "
        "Sec. 4.6): no labels; writes backbone.keras for keras-vit-train --init-from.",
    )
    add_data_arguments(p).description = "the labels of the data are ignored"
    add_model_arguments(p)
    t = add_training_arguments(p, learning_rate=LEARNING_RATE)
    t.add_argument("--target", choices=TARGETS, default="mean_color",
                   help="what each corrupted patch predicts (Appendix B.1.2): its 3-bit mean colour (default; "
                   "cross-entropy over 512 classes for RGB), its 4x4 downsized pixels, or all its pixels (both mean "
                   "squared error)")
    t.add_argument("--corruption-rate", type=float, default=0.5,
                   help="share of each image's patches corrupted, in (0, 1) (default 0.5, the paper's): 80%% "
                   "replaced by the [mask] embedding, 10%% by another patch's, 10%% left as they are")
    add_output_arguments(p, "runs/pretrain", "backbone.keras and the metrics")
    return _cli.complete_help(p)  # every flag's default in --help


def _backbone(args, model_config, image_size):
    """The encoder to pre-train: a keras_vit model without head (include_top=False), pooled on the class token.

    The pooled output (batch, hidden_size) makes backbone.keras a feature extractor that keras-vit-export takes
    as it is; pre-training reads the encoder's token sequence (`encoder_norm`) and does not use the pooling.
    """
    import keras_vit

    common = {
        "input_shape": (*image_size, 3),
        "include_top": False,
        "pooling": "token",
        "dropout_rate": args.dropout_rate or 0.0,
        "stochastic_depth_rate": args.stochastic_depth_rate or 0.0,
        "position_embedding": args.position_embedding or "learned",
    }
    if args.variant:
        return getattr(keras_vit, args.variant)(**common)
    name = "vit_digits" if not (args.image_folder or args.tfds) else "vit"
    return keras_vit.VisionTransformer(name=name, **model_config, **common)


def _build(model, dataset):
    """Calls `model` once on a one-image batch of zeros shaped like `dataset`'s inputs (all patches untouched)."""
    import tensorflow as tf

    def zeros(spec):
        return tf.zeros([1, *spec.shape[1:]], spec.dtype)

    model(tf.nest.map_structure(zeros, dataset.element_spec[0]), training=False)


def run(args):
    """Pre-trains and evaluates as `args` say, writes the files; returns the metrics dict.

    Raises:
        ValueError: a bad argument (names it), or an output folder that
            already holds a backbone.keras while `args.overwrite` is False.
    """
    if not 0 < args.corruption_rate < 1:
        raise ValueError(f"--corruption-rate must be in (0, 1). Received: {args.corruption_rate}")
    warmup_epochs = check_run_args(
        args, ("backbone.keras", "pretraining.weights.h5", "metrics.json", "history.json", "loss_curve.png"))
    model_config, image_size = builder_config(args)
    out = args.output_dir

    from keras_vit import distribute, pretraining

    strategy, chief, jit_compile = start_run(args)
    images, held_out = load_data(args, image_size, args.batch_size)
    num_train = images.num_examples
    with strategy.scope():  # model, optimizer and metrics live on the strategy's devices
        backbone = _backbone(args, model_config, image_size)
        cell_size = pretraining.backbone_cell_size(backbone)
        model = pretraining.MaskedPatchPrediction(backbone, target=args.target)
    corrupt = {"target": args.target, "corruption_rate": args.corruption_rate}
    train = pretraining.masked_patch_dataset(images, cell_size, seed=args.seed, **corrupt)
    # masked_patch_dataset draws new masks on each pass (BERT's dynamic masking); the held-out examples are kept
    # after the first pass, so that every epoch's held-out loss and the final figures score the same corruption.
    val = pretraining.masked_patch_dataset(held_out, cell_size, seed=args.seed + 1, **corrupt).cache()
    if args.strategy != "default":
        train, val = distribute.shard(train), distribute.shard(val)
    steps_per_epoch = count_steps(train)
    with strategy.scope():
        _build(model, train)  # BackupAndRestore needs built weights before fit
        pretraining.compile_pretraining(
            model,
            total_steps=args.epochs * steps_per_epoch,
            learning_rate=args.learning_rate,
            warmup_steps=int(warmup_epochs * steps_per_epoch),
            jit_compile=jit_compile,
        )
    hist, train_time = fit_with_backup(model, train, val, args, strategy, chief)
    results, eval_time = timed_evaluate(model, val)
    accuracy = [k for k in results if "accuracy" in k]
    if args.target == "mean_color":
        results = {"loss": results["loss"], "mean_color_accuracy": results[accuracy[0]]}
    num_val = held_out.num_examples or sum(int(x["images"].shape[0]) for x, _, _ in val)
    metrics = {
        **run_metrics(results, eval_time, num_val, train_time, num_train or steps_per_epoch * args.batch_size,
                       args, model, strategy),
        "backbone_parameters": int(backbone.count_params()),
        "num_train_images": num_train,
        "target": args.target,
        "corruption_rate": args.corruption_rate,
        "cell_size": cell_size,
        "num_patches": int(train.element_spec[2].shape[1]),
        "learning_rate": args.learning_rate,
        "seed": args.seed,
        "heldout_corruption_seed": args.seed + 1,
        "flags": {k: v for k, v in sorted(vars(args).items())},
    }
    if not chief:
        return metrics
    with _files.sigterm_deferred():  # a SIGTERM here waits: never a backbone.keras without its metrics
        atomic_write(os.path.join(out, "backbone.keras"), model.backbone.save)
        atomic_write(os.path.join(out, "pretraining.weights.h5"), model.save_weights)
        write_json(os.path.join(out, "history.json"), hist)
        write_json(os.path.join(out, "metrics.json"), metrics)
        plot_history(os.path.join(out, "loss_curve.png"), hist, keys=("loss", *accuracy[:1]))
    return metrics


def main(argv=None):
    """Console entry point; returns the process exit code (0 ok, 2 bad input; 143 after a SIGTERM).

    A SIGTERM removes the temporary files of what was being written and ends
    the process with status 143 (`keras_vit.common.files.exit_on_sigterm`); the
    backup folder stays, and a rerun resumes from it.
    """
    require_tensorflow("keras-vit-pretrain")

    def summary(args, metrics):
        accuracy = metrics.get("mean_color_accuracy")
        return (
            f"held-out pre-training loss {metrics['loss']:.4f}"
            + ("" if accuracy is None else f", mean-colour accuracy {accuracy:.4f} over corrupted patches")
            + f", {metrics['images_per_second']:.0f} images/s; training took {metrics['train_wall_time_s']:.0f} s; "
            f"wrote {args.output_dir}/backbone.keras, pretraining.weights.h5, metrics.json, history.json, "
            "loss_curve.png"
        )

    with _files.exit_on_sigterm():
        return cli(build_parser(), argv, run, summary)


if __name__ == "__main__":
    sys.exit(main())
