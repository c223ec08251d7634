"""`keras-vit-train --init-from`: fine-tuning a saved model (paper Sec. 3.2), at its resolution or another."""

import json

import numpy as np
import pytest

from keras_vit import train

ONE_EPOCH = ["--epochs", "1", "--warmup-epochs", "0", "--verbose", "0"]
FROZEN = [*ONE_EPOCH, "--learning-rate", "1e-12"]  # AdamW steps of ~1e-12: the saved weights are the start's


def _saved(tmp_path, name="start", **kwargs):
    """A tiny keras_vit model with random (non-zero) weights everywhere, head included, saved as .keras."""
    import keras

    import keras_vit

    config = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3),
                  classes=10, classifier_activation=None)
    config.update(kwargs)
    model = keras_vit.VisionTransformer(**config)
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.05, w.shape).astype(w.dtype) for w in model.get_weights()])
    path = tmp_path / f"{name}.keras"
    model.save(path)
    return keras.saving.load_model(path), str(path)


def _weights(model):
    return {w.path: np.asarray(w) for w in model.weights}


def test_head_is_kept_and_the_model_resized_when_the_classes_match(tmp_path, capsys):
    import keras

    import keras_vit

    start, path = _saved(tmp_path)
    out = tmp_path / "run"
    assert train.main([*FROZEN, "--init-from", path, "--image-size", "24", "--output-dir", str(out)]) == 0
    assert "resized from 16x16 to 24x24 px (keras_vit.resize); its learned position embeddings resampled once" in (
        capsys.readouterr().out)
    tuned = keras.saving.load_model(out / "model.keras")
    assert tuned.input_shape == (None, 24, 24, 3) and tuned.output_shape == (None, 10)
    expected = _weights(keras_vit.resize(start, (24, 24, 3)))
    got = _weights(tuned)
    assert sorted(got) == sorted(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)
    assert np.abs(got["predictions/kernel"]).max() > 0.01  # the saved head, not a new one
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["init_from"] == path and metrics["parameters"] == tuned.count_params()


def test_head_is_replaced_by_a_zero_initialised_one_for_other_classes(tmp_path, capsys):
    import keras

    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")  # 2 classes; the saved model has 10 and a pre-logits layer
    start, path = _saved(tmp_path, representation_size=16)
    out = tmp_path / "run"
    assert train.main([*FROZEN, "--init-from", path, "--image-folder", str(tmp_path / "photos"), "--batch-size", "4",
                       "--output-dir", str(out)]) == 0
    assert "new zero-initialised head of 2 classes (the saved head has 10; pre_logits dropped)" in capsys.readouterr().out
    tuned = keras.saving.load_model(out / "model.keras")
    names = [layer.name for layer in tuned.layers]
    assert "pre_logits" not in names and tuned.output_shape == (None, 2)
    head = tuned.get_layer("predictions")
    assert head.dtype_policy.name == "float32" and head.activation is keras.activations.linear
    assert head.class_names == ["china", "flower"]  # issue 25: the class names travel in the .keras file
    assert np.abs(np.asarray(head.kernel)).max() < 1e-9 and np.abs(np.asarray(head.bias)).max() < 1e-9
    expected = {k: v for k, v in _weights(start).items() if not k.startswith(("predictions/", "pre_logits/"))}
    got = _weights(tuned)
    assert sorted(expected) == sorted(k for k in got if not k.startswith("predictions/"))
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, atol=1e-6, err_msg=name)
    # the zero head outputs 0 for every class: the start's loss is log(2) exactly
    images = np.zeros((1, 16, 16, 3), "float32")
    np.testing.assert_allclose(tuned.predict(images, verbose=0), 0.0, atol=1e-8)


def test_sincos_2d_trains_then_fine_tunes_at_another_resolution(tmp_path, capsys):
    import keras

    out = tmp_path / "pretrain"
    tiny = ["--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
            "--mlp-dim", "32"]
    assert train.main([*tiny, *ONE_EPOCH, "--position-embedding", "sincos_2d", "--output-dir", str(out)]) == 0
    pretrained = keras.saving.load_model(out / "model.keras")
    assert pretrained.get_layer("patch_encoder").position_embedding_kind == "sincos_2d"
    capsys.readouterr()
    assert train.main([*FROZEN, "--init-from", str(out / "model.keras"), "--image-size", "32",
                       "--output-dir", str(tmp_path / "tuned")]) == 0
    assert "its sincos_2d position embeddings need no resampling" in capsys.readouterr().out
    tuned = keras.saving.load_model(tmp_path / "tuned" / "model.keras")
    assert tuned.input_shape == (None, 32, 32, 3)
    assert tuned.get_layer("patch_encoder").position_embedding_kind == "sincos_2d"
    for name, value in _weights(pretrained).items():
        np.testing.assert_allclose(_weights(tuned)[name], value, atol=1e-6, err_msg=name)


def test_a_model_of_any_resolution_stays_dynamic_and_trains_at_image_size(tmp_path, capsys):
    import keras

    _, path = _saved(tmp_path, input_shape=(None, None, 3), position_embedding_grid=(4, 4))
    out = tmp_path / "run"
    assert train.main([*FROZEN, "--init-from", path, "--output-dir", str(tmp_path / "default")]) == 0
    assert "takes any resolution; training at 16x16 px, its position table's grid (4x4 patches of 4 px" in (
        capsys.readouterr().out)
    assert train.main([*FROZEN, "--init-from", path, "--image-size", "20", "--output-dir", str(out)]) == 0
    tuned = keras.saving.load_model(out / "model.keras")
    assert tuned.input_shape == (None, None, None, 3)
    assert tuned.predict(np.zeros((1, 20, 20, 3), "float32"), verbose=0).shape == (1, 10)


def test_precision_rebuilds_the_saved_model_under_the_policy(tmp_path, policy):
    import keras

    start, path = _saved(tmp_path)
    out = tmp_path / "run"
    assert train.main([*FROZEN, "--init-from", path, "--precision", "mixed_bfloat16", "--output-dir", str(out)]) == 0
    policy("float32")
    tuned = keras.saving.load_model(out / "model.keras")
    assert tuned.get_layer("patch_encoder").compute_dtype == "bfloat16"
    assert tuned.get_layer("predictions").compute_dtype == "float32"
    for name, value in _weights(start).items():
        np.testing.assert_allclose(_weights(tuned)[name], value, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--variant", "ViTTi16"], "drop --variant"),
        (["--hidden-size", "64", "--num-layers", "2"], "drop --hidden-size, --num-layers"),
        (["--position-embedding", "sincos_2d"], "drop --position-embedding"),
        (["--dropout-rate", "0.1"], "drop --dropout-rate"),
    ],
)
def test_architecture_flags_are_refused(tmp_path, capsys, flags, message):
    _, path = _saved(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        train.main([*ONE_EPOCH, "--init-from", path, *flags, "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"--init-from {path} takes the architecture of the saved model; {message}" in err
    assert not (tmp_path / "run").exists()


def test_a_missing_or_foreign_file_or_a_bad_size_is_refused(tmp_path, capsys):
    import keras

    import keras_vit

    dense = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    dense.save(tmp_path / "dense.keras")
    vit = keras_vit.VisionTransformer(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, classes=3,
                                      input_shape=(16, 16, 3))
    keras.Sequential([keras.Input((16, 16, 3)), vit], name="outer").save(tmp_path / "nested.keras")
    (tmp_path / "junk.keras").write_bytes(b"not a zip")
    hybrid = tmp_path / "hybrid.keras"
    keras_vit.VisionTransformer(patch_size=1, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, classes=3,
                                input_shape=(16, 16, 3), resnet_num_layers=(1, 1)).save(hybrid)
    cases = [(tmp_path / "nope.keras", "no such file"),
             (tmp_path / "junk.keras", "is not a Keras .keras model file (a .keras file is a zip archive)"),
             (tmp_path / "nested.keras", "nested inside 'outer': save the ViT itself"),
             (tmp_path / "dense.keras", "is not a keras_vit Vision Transformer"),
             ((hybrid, "20"), f"--image-size must be a multiple of 8 px, the patch size (1) x the ResNet's stride (8) "
                              f"of --init-from {hybrid}. Received: --image-size 20"),
             ((hybrid, "0"), "--image-size: must be N or H,W (pixels, ints >= 1). Received: 0")]
    for path, message in cases:
        path, size = path if isinstance(path, tuple) else (path, None)
        flags = [] if size is None else ["--image-size", size]
        with pytest.raises(SystemExit) as exit_info:
            train.main([*ONE_EPOCH, "--init-from", str(path), *flags, "--output-dir", str(tmp_path / "run")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
