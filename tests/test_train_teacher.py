"""`keras-vit-train --teacher` and the deit-distill recipe (issue 46): DeiT's distillation from the command line."""

import json
import logging

import keras
import numpy as np
import pytest

from keras_vit import data, train
from keras_vit.layers import DistilledHead
from keras_vit.losses import Accuracy

pytestmark = pytest.mark.tensorflow_only  # keras-vit-train's pipelines are tf.data

TINY = ["--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
        "--mlp-dim", "32", "--epochs", "2", "--warmup-epochs", "1", "--verbose", "0"]


def _teacher_file(folder, classes=10, side=16, name="teacher.keras"):
    keras.utils.set_random_seed(3)
    teacher = keras.Sequential([keras.Input((side, side, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(classes, kernel_initializer=keras.initializers.RandomNormal(0, 0.1))],
                               name="linear_teacher")
    path = folder / name
    teacher.save(path)
    return str(path), teacher


def test_a_teacher_file_trains_a_distilled_student(tmp_path, monkeypatch, caplog, capsys):
    path, teacher = _teacher_file(tmp_path)
    out = tmp_path / "run"
    monkeypatch.chdir(tmp_path)  # the file given as a relative path; metrics.json names it absolute
    with caplog.at_level(logging.WARNING, logger="keras_vit.distillation"):
        assert train.main([*TINY, "--teacher", "teacher.keras", "--distillation", "soft", "--temperature", "2",
                           "--output-dir", str(out)]) == 0
    assert any("is frozen (trainable=False)" in r.getMessage() for r in caplog.records)  # a file's teacher
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["teacher"], metrics["distillation"], metrics["teacher_epochs"]) == (path, "soft", None)
    assert metrics["recipe_settings"]["distillation"] == "soft" and metrics["temperature"] == 2.0
    accuracy = Accuracy()  # the teacher's own held-out accuracy, measured here on the same 360 scans
    for images, labels in data.digits("validation", image_size=16, batch_size=64):
        accuracy.update_state(labels, teacher(images, training=False))
    assert metrics["teacher_accuracy"] == pytest.approx(float(accuracy.result()), abs=1e-6)
    printed = capsys.readouterr().out
    assert f"--teacher: the teacher's held-out accuracy {metrics['teacher_accuracy']:.4f}" in printed
    near_chance = "WARNING: the teacher is near chance" in printed and "give a trained teacher" in printed
    assert near_chance == (metrics["teacher_accuracy"] < 0.2)  # an untrained linear teacher: 10 classes
    assert "training_curve.png\n" in printed and "teacher.keras" not in printed.split("held-out accuracy 0.")[-1]
    model = keras.saving.load_model(out / "model.keras")
    assert isinstance(model.get_layer("predictions"), DistilledHead)
    assert metrics["parameters"] == model.count_params() and metrics["jit_compile"] is True
    assert not (out / "teacher.keras").exists()


@pytest.mark.slow
def test_the_deit_distill_recipe_trains_a_cnn_teacher_first(tmp_path, caplog, capsys):
    out = tmp_path / "run"
    flags = [*TINY, "--epochs", "1", "--warmup-epochs", "0", "--teacher-epochs", "1", "--no-xla"]
    with caplog.at_level(logging.WARNING, logger="keras_vit.distillation"):
        assert train.main([*flags, "--recipe", "deit-distill", "--output-dir", str(out)]) == 0
    assert not [r.getMessage() for r in caplog.records]  # the CNN the run trained is frozen by the run: no line
    printed = capsys.readouterr().out
    teacher_line = printed.index("training MobileNetV3Small for 1 epoch first (saved as teacher.keras)")
    # a header over each model's epoch lines (a fresh user could not tell them apart)
    assert printed.index("training the student (vit_digits, with a distillation token) for 1 epoch against the "
                         "teacher (hard distillation)") > printed.index("the teacher's held-out accuracy") > teacher_line
    assert "training_curve.png, teacher.keras" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    seconds = metrics["teacher_train_seconds"]
    assert 0 < seconds and f"--teacher cnn: trained in {seconds:.0f} s" in printed
    assert "(the label and distillation terms)" in printed
    assert f"(the student; the teacher's {seconds:.0f} s before it)" in printed
    assert (metrics["teacher"], metrics["teacher_epochs"], metrics["distillation"]) == ("cnn", 1, "hard")
    assert metrics["temperature"] is None  # hard distillation has none
    assert metrics["recipe_settings"]["mixup_alpha"] == 0.2 and metrics["recipe_settings"]["label_smoothing"] == 0.1
    teacher = keras.saving.load_model(out / "teacher.keras")
    assert teacher.input_shape == (None, 16, 16, 3) and teacher.output_shape == (None, 10)
    images, labels = next(iter(data.digits("validation", image_size=16, batch_size=360)))
    accuracy = float((np.asarray(teacher(images, training=False)).argmax(1) == labels.numpy()).mean())
    assert metrics["teacher_accuracy"] == pytest.approx(accuracy, abs=1e-6)


@pytest.mark.parametrize("flags,message", [
    (["--teacher", "missing.keras"], "--teacher 'missing.keras': give an existing .keras model file, or cnn"),
    (["--distillation", "soft"], "--distillation soft needs a teacher: give --teacher MODEL.keras or --teacher cnn"),
    (["--teacher", "cnn", "--distillation", "none"], "--distillation none turns distillation off; drop --teacher cnn"),
    (["--teacher", "cnn", "--teacher-epochs", "0"], "--teacher-epochs must be >= 1. Received: 0"),
    (["--teacher", "cnn", "--temperature", "0"], "--temperature must be a number in (0, 100]. Received: 0.0"),
    (["--teacher", "cnn", "--temperature", "inf"], "--temperature must be a number in (0, 100]. Received: inf"),
    (["--teacher", "cnn", "--temperature", "nan"], "--temperature must be a number in (0, 100]. Received: nan"),
    (["--teacher", "cnn", "--temperature", "1e20"], "--temperature must be a number in (0, 100]. Received: 1e+20"),
    # a fresh user's finding: these were silently ignored
    (["--teacher", "t.keras", "--teacher-epochs", "5"], "--teacher-epochs 5 sets the training of --teacher cnn; "
                                                        "--teacher t.keras is trained already: drop --teacher-epochs"),
    # the advice is what runs (a fresh user's finding: each led to another refusal)
    (["--teacher-epochs", "5"], "--teacher-epochs 5 sets distillation, and the run has no teacher: give --teacher cnn, "
                                "or drop --teacher-epochs"),
    (["--temperature", "2"], "--temperature 2 sets distillation, and the run has no teacher: give --teacher "
                             "MODEL.keras or --teacher cnn, with --distillation soft, or drop --temperature"),
    (["--teacher", "cnn", "--temperature", "2"], "--temperature 2 is soft distillation's, and the run distils hard "
                                                 "(the teacher's decisions, no temperature): add --distillation soft"),
    (["--recipe", "deit-distill", "--temperature", "4"], "--temperature 4 is soft distillation's, and the run distils hard"),
])
def test_bad_distillation_flags_exit_2_before_any_data(flags, message, tmp_path, capsys, monkeypatch):
    (tmp_path / "t.keras").write_bytes(b"")  # a teacher file (read only after these checks)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY, *flags, "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("classes,side,message", [
    (4, 16, "has 4 classes, the student 'vit_digits' 10"),
    (10, 8, "takes images of shape (8, 8, 3), the student 'vit_digits' (16, 16, 3)"),
])
def test_a_teacher_of_other_classes_or_images_is_refused_before_training(classes, side, message, tmp_path, capsys):
    path, _ = _teacher_file(tmp_path, classes=classes, side=side)
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY, "--teacher", path, "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--teacher {path}: The teacher 'linear_teacher' {message}" in err
    assert not (tmp_path / "run" / "model.keras").exists()


def test_a_teacher_whose_scores_cannot_be_read_is_refused_naming_the_flag(tmp_path, capsys):
    teacher = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(10, activation="relu")], name="relu_teacher")
    teacher.save(tmp_path / "relu.keras")
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY, "--teacher", str(tmp_path / "relu.keras"), "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (f"--teacher {tmp_path / 'relu.keras'}: Cannot tell whether 'relu_teacher' gives logits or probabilities "
            "(last activation 'relu'): end the teacher with a linear (logits) or softmax layer") in err
    assert "teacher_from_logits" not in err  # no such flag


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 cut short"])
def test_a_teacher_file_that_is_no_zip_is_named_so(content, tmp_path, capsys):
    path = tmp_path / "broken.keras"
    path.write_bytes(content)
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY, "--teacher", str(path), "--output-dir", str(tmp_path / "run")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--teacher {str(path)!r} is not a .keras file: a .keras file is a zip archive" in err
    assert "File not found" not in err and not (tmp_path / "run" / "model.keras").exists()


@pytest.mark.parametrize("include_top", [True, False])
def test_init_from_a_distilled_model_gets_a_new_pair_of_heads(include_top):
    import keras_vit
    from keras_vit.cli.init_from import fine_tuning_model

    saved = keras_vit.VisionTransformer(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                                        input_shape=(8, 8, 3), classes=3, include_top=include_top,
                                        distillation_token=True)
    model = fine_tuning_model(saved, 8, 5, "float32")
    head = model.get_layer("predictions")
    assert isinstance(head, DistilledHead) and model.output_shape == (None, 5)
    assert not np.any(np.asarray(head.kernel)) and not np.any(np.asarray(head.distillation_kernel))
    assert model.get_layer("pooling").output.shape == (None, 2, 16)


def test_the_recipe_keeps_an_earlier_runs_teacher_file_without_overwrite(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "teacher.keras").write_bytes(b"an earlier run's teacher")
    with pytest.raises(SystemExit) as exit_:
        train.main([*TINY, "--recipe", "deit-distill", "--output-dir", str(out)])
    assert exit_.value.code == 2 and "teacher.keras exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "teacher.keras").read_bytes() == b"an earlier run's teacher"


def test_the_cnn_teacher_trains_without_xla_on_a_tensorflow_cpu():
    import tensorflow as tf

    from keras_vit.cli.teacher import cnn_jit_compile

    accelerator = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU")
    assert cnn_jit_compile() is (None if accelerator else False)  # None: the run's own XLA setting
