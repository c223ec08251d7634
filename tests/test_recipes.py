"""keras_vit.recipes and `keras-vit-train --recipe` (issue 26)."""

import json

import pytest

from keras_vit import recipes, train
from tests.test_train_cli import TINY


def test_recipes_are_the_papers_rows():
    assert list(recipes.RECIPES) == ["paper", "augreg-light", "augreg-medium", "augreg-heavy", "deit", "mixup-smoothing",
                                     "deit-distill"]
    for name, row in recipes.RECIPES.items():
        assert set(row) == set(recipes.SETTINGS) and name in recipes.SOURCES
    assert recipes.recipe("paper") == {"rand_augment": None, "mixup_alpha": 0.0, "cutmix_alpha": 0.0,
                                       "random_erasing": 0.0, "label_smoothing": 0.0, "dropout_rate": 0.0,
                                       "stochastic_depth_rate": 0.0, "distillation": None}
    deit = recipes.recipe("deit")  # DeiT's Table 9
    assert deit["rand_augment"] == (2, 9.0) and deit["mixup_alpha"] == 0.8 and deit["cutmix_alpha"] == 1.0
    assert deit["random_erasing"] == 0.25 and deit["label_smoothing"] == 0.1 and deit["stochastic_depth_rate"] == 0.1
    # big_vision's AugReg rows: light2, medium2, strong2
    assert [recipes.recipe(f"augreg-{k}")["rand_augment"] for k in ("light", "medium", "heavy")] == [(2, 10.0), (2, 15.0), (2, 20.0)]
    assert [recipes.recipe(f"augreg-{k}")["mixup_alpha"] for k in ("light", "medium", "heavy")] == [0.2, 0.5, 0.8]
    assert recipes.recipe("mixup-smoothing") == {**recipes.recipe("augreg-light", rand_augment="none"), "label_smoothing": 0.1}
    # DeiT's hard distillation (Sec. 4) on mixup-smoothing's settings
    assert recipes.recipe("deit-distill") == {**recipes.recipe("mixup-smoothing"), "distillation": "hard"}
    assert recipes.recipe("deit-distill", distillation="none")["distillation"] is None


def test_given_settings_override_the_recipe_and_none_keeps_it():
    settings = recipes.recipe("deit", mixup_alpha=0.0, rand_augment="none", label_smoothing=None, dropout_rate=0.2)
    assert settings["mixup_alpha"] == 0.0 and settings["rand_augment"] is None
    assert settings["label_smoothing"] == 0.1 and settings["dropout_rate"] == 0.2 and settings["cutmix_alpha"] == 1.0


@pytest.mark.parametrize(
    "name,overrides,message",
    [
        ("nope", {}, r"`recipe` must be one of 'paper', 'augreg-light', 'augreg-medium', 'augreg-heavy', 'deit', 'mixup-smoothing', 'deit-distill'. Received: recipe='nope'"),
        ("paper", {"mixup": 0.2}, r"unknown recipe setting\(s\) mixup"),
        ("paper", {"rand_augment": (2, 40)}, r"`rand_augment` must be None or \(num_ops, magnitude\)"),
        ("paper", {"label_smoothing": 1.0}, r"`label_smoothing` must be a float in \[0, 1\)"),
    ],
)
def test_bad_recipe_arguments_are_named(name, overrides, message):
    with pytest.raises(ValueError, match=message):
        recipes.recipe(name, **overrides)


def test_unknown_recipe_exits_2_listing_the_names(capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--recipe", "augreg"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert ("invalid choice: 'augreg' (choose from 'paper', 'augreg-light', 'augreg-medium', 'augreg-heavy', 'deit', "
            "'mixup-smoothing', 'deit-distill')") in err


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--rand-augment", "2,31"], "--rand-augment takes OPS,M: OPS operations in [1, 11], magnitude M in [0, 30] "
         "(AugReg uses 2,10 to 2,20), or none. Received: --rand-augment 2,31"),
        (["--mixup-alpha", "-1"], "--mixup-alpha must be a number in [0, 10] (0: no Mixup). Received: --mixup-alpha -1.0"),
        (["--mixup-alpha", "inf"], "--mixup-alpha must be a number in [0, 10]"),
        (["--random-erasing", "1.5"], "--random-erasing must be a probability in [0, 1]"),
        (["--rand-augment", "two"], "argument --rand-augment: expected OPS,M (e.g. 2,10"),
    ],
)
def test_out_of_range_flags_exit_2_before_training(tmp_path, capsys, flags, message):
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, *flags, "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_mixup_on_a_one_class_folder_is_refused_naming_the_flag(tmp_path, capsys):
    from PIL import Image
    import numpy as np

    (tmp_path / "photos" / "cat").mkdir(parents=True)
    for i in range(4):
        Image.fromarray(np.full((16, 16, 3), 40 * i, "uint8")).save(tmp_path / "photos" / "cat" / f"{i}.png")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--validation-fraction", "0.5",
                    "--recipe", "augreg-light", "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    assert "--mixup-alpha mixes the labels of two classes, and the data hold 1 class" in capsys.readouterr().err


def test_deit_recipe_trains_and_records_its_settings(tmp_path):
    out = tmp_path / "run"
    assert train.main([*TINY, "--recipe", "deit", "--label-smoothing", "0.2", "--output-dir", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["recipe"] == "deit" and metrics["jit_compile"] is True
    settings = metrics["recipe_settings"]
    assert settings["label_smoothing"] == 0.2 and settings["rand_augment"] == [2, 9.0] and settings["cutmix_alpha"] == 1.0
    import keras

    model = keras.saving.load_model(out / "model.keras")
    assert model.loss.label_smoothing == 0.2
    block = model.get_layer("transformer_block_0").get_config()  # TINY has one block: it gets the whole rate
    assert block["stochastic_depth_rate"] == pytest.approx(0.1) and block["dropout_rate"] == 0.0
    history = json.loads((out / "history.json").read_text())
    assert 0 <= history["accuracy"][-1] <= 1 and 0 <= history["val_accuracy"][-1] <= 1


def test_init_from_records_the_settings_it_applied(tmp_path, capsys):
    base = tmp_path / "base"
    assert train.main([*TINY, "--output-dir", str(base)]) == 0
    out = tmp_path / "tuned"
    tiny_training = ["--epochs", "1", "--warmup-epochs", "0", "--verbose", "0"]
    assert train.main([*tiny_training, "--recipe", "deit", "--init-from", str(base / "model.keras"),
                       "--output-dir", str(out)]) == 0
    assert "--recipe deit's --stochastic-depth-rate 0.1 does not apply to it" in capsys.readouterr().err
    settings = json.loads((out / "metrics.json").read_text())["recipe_settings"]
    assert settings["stochastic_depth_rate"] is None and settings["dropout_rate"] is None
    assert settings["mixup_alpha"] == 0.8 and settings["label_smoothing"] == 0.1  # these the run did apply
