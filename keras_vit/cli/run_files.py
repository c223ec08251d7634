"""A training run's files: outputs written atomically, --output-dir and --backup-dir checks, and the resumable
backup's bookkeeping (which run it belongs to, the epoch it resumes at). Shared by keras-vit-train and
keras-vit-pretrain (keras_vit/train.py, keras_vit/pretrain.py)."""

import json
import os

from keras_vit.common import files as _files


def atomic_write(path, write):
    """Calls write(tmp_path) on a temporary file beside `path`, then moves it into place."""
    with _files.staged(path, overwrite=True) as tmp:
        write(tmp)


def write_json(path, obj):
    """Writes `obj` as indented JSON to `path`, through a temporary file moved into place."""
    def write(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")

    atomic_write(path, write)


def plot_history(path, history, keys=("loss", "accuracy")):
    """Writes a PNG with one panel per key of `history`: train and held-out ("val_" + key) per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [key for key in keys if key in history]
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        epochs = range(1, len(history[key]) + 1)
        ax.plot(epochs, history[key], label="train")
        if "val_" + key in history:
            ax.plot(epochs, history["val_" + key], label="held-out")
        ax.set_xlabel("epoch")
        ax.set_ylabel(key)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
    plt.close(fig)


def check_output_dir(out):
    """Raises ValueError unless `out` is, or can become, a folder (checked before any work)."""
    _files.check_writable_folder(out, "--output-dir")


_RUN_FILE = "run.json"  # the flags of the run a backup belongs to (check_resumable)
_BACKUP_FILES = {"latest.weights.h5", "training_metadata.json", "latest.weights.h5.bkp",
                 "training_metadata.json.bkp", _RUN_FILE}


def check_backup_dir(backup_dir, out):
    """Refuses a backup folder that holds anything else: BackupAndRestore deletes the whole folder at the end."""
    backup, output = os.path.realpath(backup_dir), os.path.realpath(out)
    if output == backup or output.startswith(backup + os.sep):
        raise ValueError(f"--backup-dir {backup_dir!r} must not be or contain --output-dir (it is deleted when "
                         "training ends)")
    if os.path.lexists(backup_dir) and not os.path.isdir(backup_dir):
        raise ValueError(f"--backup-dir {backup_dir!r} is a file; give a folder")
    if os.path.isdir(backup_dir):
        other = sorted(n for n in os.listdir(backup_dir) if n not in _BACKUP_FILES and not n.startswith("worker_"))
        if other:
            raise ValueError(
                f"--backup-dir {backup_dir!r} holds other files ({', '.join(other[:3])}); the folder is deleted when "
                "training ends, so give a new or empty folder"
            )


def has_backup(backup_dir):
    """Whether `backup_dir` holds a BackupAndRestore checkpoint that `model.fit` will restore."""
    return any(os.path.exists(os.path.join(backup_dir, name)) for name in ("training_metadata.json",
                                                                          "training_metadata.json.bkp"))


def backed_up_epoch(backup_dir):
    """The epoch a `keras.callbacks.BackupAndRestore` backup in `backup_dir` resumes at (0 without one)."""
    try:
        with open(os.path.join(backup_dir, "training_metadata.json")) as f:
            return int(json.load(f)["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def _run_config(args):
    """The flags that define a run, as stored beside its backup: all but --overwrite and --verbose."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in ("overwrite", "verbose")}


def run_file_writer(backup_dir, args):
    """A Keras callback that writes `args`' run.json into `backup_dir` at the end of the first training step.

    Put it before `keras.callbacks.BackupAndRestore` in the callback list: run.json is then on disk before the
    first backup, and a run that fails before its first step (a batch that cannot be read, a step that does not
    compile, a kill) leaves none that a later run would read (`check_resumable`).
    """
    import keras

    class RunFileWriter(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not os.path.exists(os.path.join(backup_dir, _RUN_FILE)):
                os.makedirs(backup_dir, exist_ok=True)
                write_json(os.path.join(backup_dir, _RUN_FILE), _run_config(args))

    return RunFileWriter()


def discard_run_file(backup_dir, created):
    """After a failed `model.fit` that left no backup: removes run.json, and `backup_dir` if `created` and empty."""
    if has_backup(backup_dir):
        return
    try:
        os.remove(os.path.join(backup_dir, _RUN_FILE))
    except FileNotFoundError:
        pass
    if created:
        try:
            os.rmdir(backup_dir)
        except OSError:  # not empty (BackupAndRestore's own files), or gone
            pass


def check_resumable(backup_dir, args):
    """Refuses to resume a backup that another command left (BackupAndRestore would restore it regardless)."""
    if not has_backup(backup_dir):
        return
    try:
        with open(os.path.join(backup_dir, _RUN_FILE)) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return
    config = json.loads(json.dumps(_run_config(args)))  # the JSON form, as saved (tuples become lists)
    if saved != config:
        changed = [k for k in sorted(set(saved) | set(config)) if saved.get(k) != config.get(k)]
        raise ValueError(
            f"{backup_dir} holds the backup of an interrupted run of another command ("
            + ", ".join(f"--{k.replace('_', '-')} {saved.get(k)!r} then, {config.get(k)!r} now" for k in changed[:4])
            + "): rerun that command to resume it, or delete the folder to start afresh"
        )


def backup_callback(backup_dir, save_freq):
    """`keras.callbacks.BackupAndRestore` (double checkpoint, deleted at the end) that also keeps the model's random
    state, so that a resumed run's dropout and stochastic-depth masks are an uninterrupted run's.

    Keras 3.15 saves the weights and the optimizer but not the states of the layers' `SeedGenerator`s (dropout,
    DropPath): a resumed run drew its masks from the start again and ended at other weights (docs/traps.md).
    Here the states go into the backup's `training_metadata.json` (`"seed_states"`), which the double checkpoint
    copies with the weights, and come back when the backup is restored.

    Args:
        backup_dir: str, the backup folder.
        save_freq: "epoch" or an int, steps between backups.

    Returns:
        The callback.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    def seed_generators(model):
        return [g for layer in model._flatten_layers(include_self=True) for g in getattr(layer, "_seed_generators", [])]

    class BackupAndRestore(keras.callbacks.BackupAndRestore):
        def _save_model(self):
            super()._save_model()
            with tf.io.gfile.GFile(self._training_metadata_path, "r") as f:
                metadata = json.loads(f.read())
            metadata["seed_states"] = [np.asarray(g.state.value).tolist() for g in seed_generators(self.model)]
            with tf.io.gfile.GFile(self._training_metadata_path, "w") as f:
                f.write(json.dumps(metadata))

        def _load_model(self):
            super()._load_model()
            if not tf.io.gfile.exists(self._training_metadata_path):
                return
            with tf.io.gfile.GFile(self._training_metadata_path, "r") as f:
                states = json.loads(f.read()).get("seed_states")
            generators = seed_generators(self.model)
            if states is not None and len(states) == len(generators):
                for generator, state in zip(generators, states):
                    generator.state.assign(np.asarray(state, dtype=generator.state.dtype))

    return BackupAndRestore(backup_dir, save_freq=save_freq, double_checkpoint=True, delete_checkpoint=True)
