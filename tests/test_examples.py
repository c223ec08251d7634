"""Smoke tests: each example runs end to end on tiny settings."""

import importlib.util
import pathlib

import numpy as np
import pytest

from tests.test_data import _write_image_folder

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_example_has_a_smoke_test():
    tested = {"build_and_predict", "finetune_image_folder", "finetune_tfds", "finetune_pretrained",
              "inspect_attention", "position_embedding_ablation", "masked_patch_pretraining"}
    assert {p.stem for p in EXAMPLES.glob("*.py")} == tested


def test_build_and_predict(capsys):
    probs = load("build_and_predict").main(["--variant", "ViTTi16", "--image-size", "64"])
    assert probs.shape == (1, 1000)
    np.testing.assert_allclose(probs, 1 / 1000, rtol=1e-5)  # zero-initialised head
    expected = 5_717_416 - (197 - 17) * 192  # pinned 224-px count, 17 positions at 64 px instead of 197
    assert f"vit_ti16: {expected:,} parameters" in capsys.readouterr().out


def test_finetune_image_folder(tmp_path):
    _write_image_folder(tmp_path / "photos")
    out = tmp_path / "m.keras"
    history = load("finetune_image_folder").main(
        [str(tmp_path / "photos"), "--image-size", "32", "--epochs", "1", "--batch-size", "4", "--output", str(out)]
    )
    assert out.exists() and len(history.history["val_accuracy"]) == 1


def test_finetune_tfds_with_mock_data(tmp_path):
    import tensorflow_datasets as tfds

    out = tmp_path / "m.keras"
    with tfds.testing.mock_data(num_examples=16):
        history = load("finetune_tfds").main(
            ["mnist", "--image-size", "16", "--epochs", "1", "--batch-size", "8", "--output", str(out)]
        )
    assert out.exists() and np.isfinite(history.history["loss"][0])


def test_finetune_pretrained_at_a_higher_resolution(tmp_path, capsys):
    import keras

    from tests.weights import reference

    checkpoint = tmp_path / "pretrained.npz"  # a 16-px "pre-trained" ViT in Google's layout, 5-class head
    np.savez(checkpoint, **reference.google_checkpoint(0))
    out = tmp_path / "m.keras"
    history = load("finetune_pretrained").main(
        [str(checkpoint), "--epochs", "1", "--batch-size", "64", "--output", str(out)]
    )
    printed = capsys.readouterr().out
    assert "loaded a google checkpoint; position grid ((4, 4), (7, 7))" in printed  # 16 px -> 28 px
    model = keras.saving.load_model(out)
    assert model.input_shape == (None, 28, 28, 3) and model.output_shape == (None, 10)
    assert np.isfinite(history.history["loss"][0])


def test_finetune_pretrained_lists_the_published_files(capsys):
    assert load("finetune_pretrained").main(["--list"]) is None
    printed = capsys.readouterr().out
    assert "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz" in printed


def test_inspect_attention_trains_and_writes_four_figures(tmp_path):
    import matplotlib.image

    paths = load("inspect_attention").main(["--epochs", "1", "--image-size", "16", "--output-dir", str(tmp_path)])
    assert sorted(pathlib.Path(p).name for p in paths) == [
        "attention_distance.png", "embedding_filters.png", "position_embedding_similarity.png", "rollout.png"]
    for p in paths:
        assert matplotlib.image.imread(p).shape[0] > 50


def test_inspect_attention_with_given_weights(tmp_path):
    from tests.weights import reference

    checkpoint = tmp_path / "ckpt.npz"
    np.savez(checkpoint, **reference.google_checkpoint(0))
    paths = load("inspect_attention").main(["--weights", str(checkpoint), "--output-dir", str(tmp_path / "f")])
    assert len(paths) == 4


def test_position_embedding_ablation_writes_both_tables(tmp_path, capsys):
    import json

    module = load("position_embedding_ablation")
    with pytest.raises(SystemExit):
        module.main(["--seeds", "0", "--output-dir", str(tmp_path)])
    assert "--seeds must be >= 1. Received: 0" in capsys.readouterr().err
    hidden = 32
    results = module.main(["--hidden-size", str(hidden), "--num-layers", "1", "--num-heads", "2", "--mlp-dim", "64",
                           "--epochs", "1", "--finetune-epochs", "1", "--steps-per-epoch", "2", "--no-xla",
                           "--output-dir", str(tmp_path)])
    assert json.loads((tmp_path / "ablation.json").read_text()) == json.loads(json.dumps(results))
    markdown = (tmp_path / "ablation.md").read_text()
    assert markdown == module.tables(results) and markdown in capsys.readouterr().out

    kinds = results["position_embeddings"]
    assert list(kinds) == ["learned", "learned_2d", "sincos_2d", "none"]
    for r in kinds.values():
        assert len(r["accuracy"]) == 1 and 0 <= r["mean"] <= 1 and r["std"] is None
    # Position weights: the 1D table has 1 + 4 * 4 rows of width D, the 2D tables 4 + 4 rows of D / 2; no others.
    none = kinds["none"]["parameters"]
    assert kinds["sincos_2d"]["parameters"] == none
    assert kinds["learned"]["parameters"] - none == 17 * hidden
    assert kinds["learned_2d"]["parameters"] - none == 8 * hidden // 2

    resolution = results["resolution"]
    assert list(resolution["accuracy"]) == [module.RUNTIME, module.FINETUNED, module.CONTROL]
    for by_size in resolution["accuracy"].values():
        assert list(by_size) == ["16", "24", "32"] and all(0 <= a <= 1 for a in by_size.values())
    # At 16 px the any-resolution model is the trained "learned" model of part 1: the same logits, the same accuracy.
    assert resolution["max_abs_logit_diff_any_resolution_vs_trained_at_16px"] < 1e-5
    assert resolution["accuracy"][module.RUNTIME]["16"] == kinds["learned"]["accuracy"][0]
    lines = markdown.splitlines()
    assert lines[0].startswith("| position embedding |") and len(lines) == 2 + 4 + 1 + 2 + 3

    several = module._summary([0.5, 0.7, 0.6])  # what --seeds 3 reports
    np.testing.assert_allclose([several[k] for k in ("mean", "std", "min", "max")], [0.6, 0.1, 0.5, 0.7])


def test_masked_patch_pretraining_compares_pretrained_and_scratch_on_the_same_steps(tmp_path, capsys):
    import json

    import keras
    import matplotlib.image

    from keras_vit import data

    module = load("masked_patch_pretraining")
    with pytest.raises(SystemExit):
        module.main(["--corruption-rate", "1", "--output-dir", str(tmp_path)])
    assert "--corruption-rate must be in (0, 1). Received: 1.0" in capsys.readouterr().err
    # Pre-training moves the weights far (Adam, 0.01); fine-tuning barely (1e-4): a run that started from the
    # backbone ends near it, one from scratch does not.
    results = module.main(["--seeds", "1", "--pretrain-epochs", "1", "--finetune-epochs", "1", "--hidden-size", "32",
                           "--num-layers", "1", "--num-heads", "2", "--mlp-dim", "64", "--batch-size", "128",
                           "--pretrain-learning-rate", "0.01", "--finetune-learning-rate", "1e-4", "--no-xla",
                           "--output-dir", str(tmp_path)])
    assert json.loads((tmp_path / "masked_patch_pretraining.json").read_text()) == json.loads(json.dumps(results))
    markdown = (tmp_path / "masked_patch_pretraining.md").read_text()
    assert markdown == module.table(results) and markdown in capsys.readouterr().out
    assert [line.split(" | ")[0] for line in markdown.splitlines()[2:4]] == ["| 10%", "| 100%"]

    (_, y_train), (_, y_val), _ = data.load_digits()
    images = np.concatenate([x for x, _ in data.digits("validation", image_size=16, batch_size=512)])
    backbone = str(tmp_path / "seed_0" / "pretrain" / "backbone.keras")
    assert list(results["runs"]) == ["0.1", "1.0"]
    for fraction, by_init in results["runs"].items():
        scratch, pretrained = by_init["scratch"][0], by_init["pretrained"][0]
        # The same labels and steps for both: 12 steps of 128 on all 1,437 labels, 6 two-step epochs on 10% (144).
        subset = len(data.stratified_subset(y_train, float(fraction), seed=0))
        assert scratch["num_train_images"] == pretrained["num_train_images"] == subset
        assert scratch["steps"] == pretrained["steps"] == 12
        assert pretrained["init_from"] == backbone and scratch["init_from"] is None
        assert pretrained["distance_to_backbone"] < 0.1 * scratch["distance_to_backbone"]
        for run in (scratch, pretrained):
            model = keras.saving.load_model(pathlib.Path(run["output_dir"]) / "model.keras")
            recomputed = np.mean(np.argmax(model.predict(images, verbose=0), axis=-1) == y_val)
            assert 0 <= run["accuracy"] <= 1 and abs(run["accuracy"] - recomputed) <= 1 / 360 + 1e-6
        summary = results["summary"][fraction]
        assert summary["scratch"]["mean"] == scratch["accuracy"] and summary["pretrained"]["std"] is None
        np.testing.assert_allclose(summary["gain_points"]["mean"], 100 * (pretrained["accuracy"] - scratch["accuracy"]))
    pre = results["pretraining"][0]
    assert 0 <= pre["mean_color_accuracy"] <= 1 and np.isfinite(pre["loss"])
    assert 0 < results["pretraining_summary"]["mean_color_majority_baseline"] < 1
    figure = matplotlib.image.imread(results["figure"]["path"])
    assert figure.shape[0] > 200 and figure.std() > 0 and 0 <= results["figure"]["mean_color_accuracy"] <= 1
