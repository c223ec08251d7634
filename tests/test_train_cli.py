"""The main job, `keras-vit-train`, end to end."""

import json
import os

import pytest
from PIL import Image

from keras_vit import train

TINY = ["--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
        "--mlp-dim", "32", "--epochs", "2", "--warmup-epochs", "1", "--verbose", "0"]


def test_writes_model_metrics_history_and_curve(tmp_path):
    out = tmp_path / "run"
    assert train.main([*TINY, "--output-dir", str(out)]) == 0
    assert sorted(os.listdir(out)) == ["history.json", "metrics.json", "model.keras", "training_curve.png"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert {"accuracy", "loss", "images_per_second", "wall_time_s"} <= set(metrics)
    assert metrics["num_heldout_images"] == 360 and metrics["jit_compile"] is True and metrics["backend"] == "tensorflow"
    # issue 17: the reported figures recomputed independently from the saved model and the held-out scans
    import keras
    import numpy as np

    from keras_vit import data

    model = keras.saving.load_model(out / "model.keras")
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in data.digits("validation", image_size=16, batch_size=50)])
    logits = model.predict(np.concatenate(images), verbose=0)
    labels = np.concatenate(labels)
    correct = int((logits.argmax(-1) == labels).sum())
    assert abs(metrics["accuracy"] * 360 - correct) <= 1  # one near-tie may flip with another batch size
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    assert metrics["loss"] == pytest.approx(float(loss), rel=1e-3)  # no label smoothing by default; other batching
    assert metrics["images_per_second"] == pytest.approx(360 / metrics["wall_time_s"], rel=1e-6)
    history = json.loads((out / "history.json").read_text())
    assert len(history["loss"]) == 2 and len(history["val_accuracy"]) == 2
    assert (out / "training_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_output_dir_that_cannot_be_written_is_refused_with_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--output-dir", "/proc/keras_vit_run"])
    assert exit_info.value.code == 2
    assert "--output-dir '/proc/keras_vit_run': '/proc' is not writable" in capsys.readouterr().err


def test_refuses_to_overwrite_without_flag(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "model.keras").write_text("earlier run")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--output-dir", str(out)])
    assert exit_info.value.code == 2
    assert "model.keras exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "model.keras").read_text() == "earlier run"


@pytest.mark.parametrize(
    "args,message",
    [
        (["--patch-size", "5"], "--image-size must be a multiple of 5 px, --patch-size 5. Received: --image-size 16"),
        (["--learning-rate", "0"], "--learning-rate must be > 0. Received: 0.0"),
        (["--num-heads", "3"], "--hidden-size must be divisible by --num-heads. Received: --hidden-size 32, --num-heads 3"),
        (["--num-layers", "0"], "--num-layers must be >= 1. Received: 0"),
        (["--patch-size", "32"], "--image-size must be a multiple of 32 px, --patch-size 32. Received: --image-size 16"),
        (["--epochs", "0"], "--epochs must be >= 1"),
        (["--warmup-epochs", "5"], "--warmup-epochs must be in [0, --epochs=2). Received: 5.0"),
        (["--dropout-rate", "1.5"], "--dropout-rate must be in [0, 1). Received: 1.5"),
        (["--stochastic-depth-rate", "-0.1"], "--stochastic-depth-rate must be in [0, 1). Received: -0.1"),
        (["--variant", "ViTTi16", "--hidden-size", "8"], "--variant ViTTi16 fixes the architecture"),
        (["--image-size", "0"], "--image-size: must be N or H,W (pixels, ints >= 1). Received: 0"),
        (["--image-size", "16,18"], "--image-size must be a multiple of 4 px, --patch-size 4. Received: --image-size 16,18"),
        (["--image-size", "16,16,16"], "--image-size: must be N or H,W (pixels, ints >= 1). Received: 16,16,16"),
        (["--image-folder", "/nonexistent/photos"],
         "--image-folder must be an existing folder. Received: --image-folder /nonexistent/photos"),
        (["--precision", "mixed_bfloat"], "argument --precision: invalid choice: 'mixed_bfloat' (choose from 'float32', "
         "'mixed_bfloat16', 'mixed_float16'); did you mean 'mixed_bfloat16'?"),
        (["--variant", "ViTB-16"], "invalid choice: 'ViTB-16' (choose from "),
        (["--augment", "flip"], "'flip' (choose from 'none', 'crop', 'crop_flip', 'affine'); did you mean 'crop_flip'?"),
        (["--augment", "zoom"], "argument --augment: invalid choice: 'zoom' (choose from 'none', 'crop', 'crop_flip', "
         "'affine') (usage: keras-vit-train --help)\n"),  # no choice close enough: no guess
    ],
)
def test_bad_input_exits_2_with_message(tmp_path, capsys, args, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, *args, "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "run" / "model.keras").exists()


@pytest.mark.parametrize("value,size", [("16", (16, 16)), ("16,24", (16, 24)), ("24x16", (24, 16))])
def test_image_size_takes_n_or_h_w_as_keras_vit_export_does(value, size):
    """Issue 44: keras-vit-train took a square --image-size N only, keras-vit-export H,W; both take either now."""
    args = train.build_parser().parse_args([*TINY, "--image-size", value, "--output-dir", "unused"])
    config, image_size = train.builder_config(args)
    assert image_size == size and config["patch_size"] == 4


def test_checks_that_need_no_data_run_before_the_data_is_read(tmp_path, capsys, monkeypatch):
    def unread(*args):
        raise AssertionError("the data were read")

    monkeypatch.setattr(train, "load_data", unread)
    for args, message in (
        ([*TINY, "--num-heads", "3"], "--hidden-size must be divisible by --num-heads"),
        ([*TINY, "--dropout-rate", "1"], "--dropout-rate must be in [0, 1). Received: 1.0"),
        ([*TINY, "--mlp-dim", "0"], "--mlp-dim must be >= 1. Received: 0"),
        (["--variant", "ViTS32", "--image-size", "48"],
         "--image-size must be a multiple of 32 px, the patch size of --variant ViTS32. Received: --image-size 48"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            train.main([*args, "--output-dir", str(tmp_path / "run")])
        assert exit_info.value.code == 2 and f"error: {message}" in capsys.readouterr().err


@pytest.mark.parametrize("module", ["train", "pretrain"])
def test_a_data_flag_the_source_would_ignore_is_refused(module, tmp_path, capsys, monkeypatch):
    """From a fresh-user review (issue 43): --validation-split (a TFDS split name), --train-split and --tfds-data-dir
    with --image-folder, and --validation-fraction with the digits, were ignored without a word."""
    import importlib

    command = importlib.import_module(f"keras_vit.{module}")

    def unread(*args):
        raise AssertionError("the data were read")

    monkeypatch.setattr(train, "load_data", unread)
    monkeypatch.setattr(command, "load_data", unread)
    folder = str(tmp_path / "photos")
    for args, message in (
        (["--image-folder", folder, "--validation-split", "0.1"], "--validation-split 0.1: this flag names --tfds "
         "splits or data, and the data is --image-folder " + folder + "; hold out a share of the folder with "
         "--validation-fraction (default 0.2)"),
        (["--image-folder", folder, "--train-split", "train[:50%]", "--tfds-data-dir", "/data"],
         "--train-split train[:50%], --tfds-data-dir /data: these flags name --tfds splits or data"),
        (["--validation-split", "test[:10%]"], "and the data is the digits (the default data); train on a TFDS data "
         "set with --tfds NAME"),
        (["--validation-fraction", "0.3"], "--validation-fraction 0.3 holds out a share of --image-folder, and the "
         "data is the digits: use their fixed held-out split"),
        (["--tfds", "beans", "--validation-fraction", "0.1"], "and the data is --tfds beans: use --validation-split "
         "(a TFDS split name)"),
        (["--max-pixels", "100"], "--max-pixels 100 limits the images of --image-folder, and the data is the digits"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            command.main([*TINY, *args, "--output-dir", str(tmp_path / "run")])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and f"{module}: error: --" in err and message in err, err


def test_max_pixels_limits_the_image_folder(tmp_path, capsys):
    """Issue 43, item 5: the decompression-bomb limit can be changed on the command line too."""
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")
    side = Image.open(next((tmp_path / "photos").rglob("*.png"))).size
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--max-pixels", "10",
                    "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"it is {side[0]} x {side[1]} pixels, more than the limit of 10 " in err, err
    assert "--max-pixels" in err and not (tmp_path / "run" / "model.keras").exists()


def test_library_errors_name_flags_not_parameters(tmp_path, capsys):
    from keras_vit.common.cli_text import suggestion
    from keras_vit.cli.args import flag_names
    from tests.test_data import _write_image_folder

    parser = train.build_parser()
    assert flag_names("`hidden_size` must be divisible by `num_heads`. Received: hidden_size=128, num_heads=3",
                      parser) == "--hidden-size must be divisible by --num-heads. Received: --hidden-size 128, --num-heads 3"
    assert flag_names("validation_split=0.05 of the 10 images in '/a/batch_size/x' leaves an empty validation subset; "
                      "add images or change validation_split", parser) == (
        "--validation-fraction 0.05 of the 10 images in '/a/batch_size/x' leaves an empty validation subset; add "
        "images or change --validation-fraction")
    assert flag_names("`seed` must be None. Received: seed=-1 (a==b)", parser) == "--seed must be None. Received: --seed -1 (a==b)"
    assert suggestion("imagenet21", ["imagenet", "imagenet21k"]) == "; did you mean 'imagenet21k'?"
    _write_image_folder(tmp_path / "photos")  # 10 images: a 5% validation split holds none
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--validation-fraction", "0.05",
                    "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: --validation-fraction 0.05 of the 10 images in " in err and "change --validation-fraction" in err


@pytest.mark.parametrize("module", ["train", "pretrain"])
def test_help_shows_every_default(module):
    import importlib

    parser = importlib.import_module(f"keras_vit.{module}").build_parser()
    formatter = parser._get_formatter()
    for action in parser._actions:
        if action.option_strings and action.dest != "help":
            text = " ".join(formatter._format_action(action).split())  # as --help shows it
            assert "default" in text.lower() and "default: None" not in text, text
    assert "--epochs EPOCHS (default: 100)" in " ".join(parser.format_help().split())


def test_output_dir_that_is_a_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    for out in (tmp_path / "afile", tmp_path / "afile" / "sub"):
        with pytest.raises(SystemExit) as exit_info:
            train.main([*TINY, "--output-dir", str(out)])
        assert exit_info.value.code == 2
        assert "cannot be a folder" in capsys.readouterr().err
    assert (tmp_path / "afile").read_text() == "x"


def test_default_warmup_fits_short_runs(tmp_path):
    i = TINY.index("--warmup-epochs")
    args = TINY[:i] + TINY[i + 2 :]
    args[args.index("--epochs") + 1] = "1"
    assert train.main([*args, "--output-dir", str(tmp_path / "run")]) == 0
    assert oct(os.stat(tmp_path / "run" / "metrics.json").st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_undecodable_image_is_a_clear_error(tmp_path, capsys):
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")
    (tmp_path / "photos" / "china" / "junk.jpg").write_bytes(b"this is not a jpeg")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--output-dir", str(tmp_path / "run"), "--batch-size", "4"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    junk = tmp_path / "photos" / "china" / "junk.jpg"
    assert f"error: the image file {str(junk)!r} (18 bytes) cannot be read: Unknown image file format" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()  # refused before training: no backup/ either


def test_a_run_that_fails_in_its_first_step_leaves_no_run_file(tmp_path, monkeypatch, capsys):
    """backup/run.json says which run a backup belongs to: one that never trained must leave none behind."""
    import tensorflow as tf

    load = train.load_data

    def failing(args, image_size, batch_size, settings=None):  # the first batch fails inside fit, as a bad TFDS record would
        good, val = load(args, image_size, batch_size, settings)
        bad = good.map(lambda x, y: (tf.debugging.check_numerics(x * float("nan"), "a bad record"), y))
        bad.class_names, bad.num_examples = good.class_names, good.num_examples
        return bad, val

    monkeypatch.setattr(train, "load_data", failing)
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--output-dir", str(out)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "error: the data could not be read: " in err and "a bad record : Tensor had NaN values" in err
    assert not (out / "backup").exists()
    backup = tmp_path / "mine"  # an empty --backup-dir of the user's own is kept, empty
    backup.mkdir()
    with pytest.raises(SystemExit):
        train.main([*TINY, "--output-dir", str(out), "--backup-dir", str(backup)])
    assert os.listdir(backup) == []


def test_image_folder(tmp_path):
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")
    out = tmp_path / "run"
    assert train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--output-dir", str(out), "--batch-size", "4"]) == 0
    assert json.loads((out / "metrics.json").read_text())["class_names"] == ["china", "flower"]
    import keras

    import keras_vit

    # issue 25: the class names travel inside the .keras file, to keras-vit-export
    assert keras_vit.layers.model_class_names(keras.saving.load_model(out / "model.keras")) == ["china", "flower"]


def _one_epoch():
    args = list(TINY)
    args[args.index("--epochs") + 1], args[args.index("--warmup-epochs") + 1] = "1", "0"
    return args


def test_mixed_float16_trains_with_loss_scaling(tmp_path, policy):
    import keras
    import numpy as np

    from keras_vit import training

    out = tmp_path / "run"
    assert train.main([*_one_epoch(), "--precision", "mixed_float16", "--batch-size", "256", "--output-dir", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["precision"] == "mixed_float16" and metrics["jit_compile"] is True
    history = json.loads((out / "history.json").read_text())
    assert np.all(np.isfinite(history["loss"])) and np.isfinite(metrics["loss"])
    policy("float32")  # the run set mixed_float16 globally; the model file carries its own policy
    model = keras.saving.load_model(out / "model.keras")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert type(model.optimizer.inner_optimizer) is training.AdamW
    # 1 epoch: 1,437 images in 6 batches. Each step whose float16 gradients overflow is skipped and halves the
    # loss scale (2 ** 15 at first; it grows only after 2,000 good steps): the state came back with the model.
    skipped = np.log2(2.0**15 / float(model.optimizer.dynamic_scale))
    assert skipped == int(skipped) and int(model.optimizer.iterations) + skipped == 6 and skipped < 6
    assert model.get_layer("patch_encoder").compute_dtype == "float16"


DETERMINISTIC_CLI = r"""
import sys
from keras_vit import train
out, args = sys.argv[1], sys.argv[2:]
try:
    train.main([*args, "--output-dir", out + "/on", "--xla", "on"])
except SystemExit as e:
    print("XLA_ON_EXIT", e.code, flush=True)
sys.exit(train.main([*args, "--output-dir", out + "/auto"]))
"""


def test_tf_deterministic_ops_trains_without_xla_and_says_why(tmp_path):
    import subprocess
    import sys

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_DETERMINISTIC_OPS": "1"}
    run = subprocess.run([sys.executable, "-c", DETERMINISTIC_CLI, str(tmp_path), *_one_epoch()], capture_output=True,
                         text=True, timeout=600, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "XLA_ON_EXIT 2" in run.stdout and "Traceback" not in run.stderr
    assert "keras-vit-train: error: --xla on: TensorFlow's op determinism is on" in run.stderr
    assert not (tmp_path / "on").exists()
    assert "--xla auto: op determinism is on (TF_DETERMINISTIC_OPS=1): training deterministically without XLA" in run.stderr
    metrics = json.loads((tmp_path / "auto" / "metrics.json").read_text())
    assert metrics["jit_compile"] is False and metrics["xla"] == "auto"


def test_the_global_dtype_policy_is_given_back(tmp_path):
    """--precision sets Keras' global policy for the run; an in-process caller gets its own back."""
    import keras

    assert train.main([*TINY, "--epochs", "1", "--warmup-epochs", "0", "--precision", "mixed_bfloat16",
                       "--output-dir", str(tmp_path / "run")]) == 0
    assert keras.config.dtype_policy().name == "float32"


def test_another_commands_results_and_a_one_class_folder_are_refused(tmp_path, capsys):
    """A fresh-user review: keras-vit-train replaced keras-vit-pretrain's metrics.json in the same folder without
    --overwrite, and trained a 'classifier' of one class to a perfect score."""
    from tests.test_data import _write_image_folder

    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text('{"mean_color_accuracy": 0.5}')
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--output-dir", str(out)])
    assert exit_info.value.code == 2
    assert "metrics.json exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert (out / "metrics.json").read_text() == '{"mean_color_accuracy": 0.5}'
    _write_image_folder(tmp_path / "photos")
    os.rename(tmp_path / "photos" / "flower", tmp_path / "flower")  # one class left
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--batch-size", "4",
                    "--output-dir", str(tmp_path / "one")])
    assert exit_info.value.code == 2
    assert "the training data hold one class (china); a classifier needs at least 2" in capsys.readouterr().err
