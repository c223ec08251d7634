"""A training run's middle, shared by `keras-vit-train` and `keras-vit-pretrain` (keras_vit/train.py,
keras_vit/pretrain.py): start-up (strategy, XLA, seed, precision), `model.fit` with a resumable backup, a timed
held-out evaluation, and the metrics both write to metrics.json.
"""

import os
import sys
import time

from keras_vit.cli.run_files import backed_up_epoch, backup_callback, discard_run_file, has_backup, run_file_writer
from keras_vit.common.backend import backend

_ITERATORS_PER_EPOCH = 2  # keras/src/trainers/epoch_iterator.py: one at the end of an epoch, one at the start


def start_run(args):
    """Strategy, XLA choice (said on stderr when auto turns it off), seed and global policy; (strategy, chief, jit)."""
    import keras

    from keras_vit import distribute

    strategy = distribute.get_strategy(args.strategy, tpu=args.tpu)
    jit_compile, why = distribute.choose_xla(args.xla, strategy, args.precision)
    if why:
        print(f"--xla {args.xla}: {why}", file=sys.stderr)
    keras.utils.set_random_seed(args.seed)
    keras.mixed_precision.set_global_policy(args.precision)
    return strategy, distribute.is_chief(), jit_compile


def count_steps(train):
    """Batches per epoch of a tf.data pipeline of known size.

    Raises:
        ValueError: the pipeline is empty or of unknown size.
    """
    steps = int(train.cardinality())
    if steps < 1:
        raise ValueError("the training data set is empty or of unknown size")
    return steps


def fit_with_backup(model, train, val, args, strategy, chief):
    """`model.fit` for `args.epochs` with a resumable backup (BackupAndRestore); returns (history dict, seconds)."""
    from keras_vit import distribute

    distribute.prepare_fit(model, train, strategy)
    out = args.output_dir
    os.makedirs(out, exist_ok=True)
    backup_dir = args.backup_dir or os.path.join(out, "backup")
    if not chief:  # each worker keeps its own state; only the chief writes the outputs
        backup_dir = os.path.join(backup_dir, f"worker_{distribute.cluster_spec()['task']['index']}")
    backup = backup_callback(backup_dir, args.backup_every or "epoch")  # random state kept too
    # A resumed run restarts at the epoch it was in; advance the pipeline's reshuffling to that epoch, so that
    # it sees the same images in the same order as an uninterrupted run. Creating an iterator is what moves a
    # tf.data reshuffle on (no data is read), and Keras 3.15's fit creates two per epoch (docs/traps.md).
    done = backed_up_epoch(backup_dir)
    callbacks = [backup]
    created = not os.path.isdir(backup_dir)
    if has_backup(backup_dir):
        print(f"resuming the interrupted run backed up in {backup_dir}: {done} of {args.epochs} epochs done",
              flush=True)
    else:  # run.json, the flags the backup belongs to, is written once the first step has run, before any backup
        callbacks.insert(0, run_file_writer(backup_dir, args))
    for _ in range(_ITERATORS_PER_EPOCH * done):
        iter(train)
    start = time.perf_counter()
    try:
        # The pipeline shuffles with --seed; Keras' own shuffle does not apply to tf.data.
        history = model.fit(train, validation_data=val, epochs=args.epochs, verbose=args.verbose, shuffle=False,
                            callbacks=callbacks)
    except BaseException:  # failed (or SIGTERM) before the first backup: no run.json left without one
        discard_run_file(backup_dir, created)
        raise
    train_time = time.perf_counter() - start
    return {k: [float(v) for v in vals] for k, vals in history.history.items()}, train_time


def timed_evaluate(model, val):
    """`model.evaluate(val)` as a dict, timed after a warm-up call that compiles the step; (results, seconds)."""
    model.evaluate(val, verbose=0)
    start = time.perf_counter()
    results = model.evaluate(val, verbose=0, return_dict=True)
    return results, time.perf_counter() - start


def run_metrics(results, eval_time, num_val, train_time, num_train, args, model, strategy):
    """The metrics both CLIs write: evaluation results, speed, wall times and the run's set-up."""
    return {
        **{k: float(v) for k, v in results.items()},
        "images_per_second": num_val / eval_time,
        "wall_time_s": eval_time,
        "num_heldout_images": num_val,
        "train_wall_time_s": train_time,
        "train_images_per_second": args.epochs * num_train / train_time,
        "epochs": args.epochs,
        "parameters": int(model.count_params()),
        "precision": args.precision,
        "xla": args.xla,
        "jit_compile": bool(model.jit_compile),
        "backend": backend(),
        "strategy": args.strategy,
        "replicas": int(strategy.num_replicas_in_sync),
    }
