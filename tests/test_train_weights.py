"""`keras-vit-train --weights NAME|FILE` and `--freeze-backbone` (paper Sec. 3.2), offline."""

import dataclasses
import json

import numpy as np
import pytest

from keras_vit import train

ONE_EPOCH = ["--epochs", "1", "--warmup-epochs", "0", "--verbose", "0"]


def _checkpoint(tmp_path, classes=10, **kwargs):
    """A tiny ViT (16 px, 4x4 patches of 4 px) with random non-zero weights, saved in Google's .npz layout."""
    import keras_vit
    from keras_vit.weights import save_checkpoint

    config = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3),
                  classes=classes, classifier_activation=None)
    config.update(kwargs)
    model = keras_vit.VisionTransformer(**config)
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.05, w.shape).astype(w.dtype) for w in model.get_weights()])
    return model, save_checkpoint(model, tmp_path / "start.npz")


def _weights(model):
    return {w.path: np.asarray(w) for w in model.weights}


def test_a_local_file_fine_tunes_resampled_and_freeze_backbone_trains_the_head_alone(tmp_path, capsys):
    import keras

    from keras_vit.weights import resample_position_embedding

    start, path = _checkpoint(tmp_path, classes=3)  # digits has 10 classes: a new, zero-initialised head
    out = tmp_path / "probe"
    assert train.main([*ONE_EPOCH, "--weights", path, "--image-size", "24", "--freeze-backbone",
                       "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert (f"--weights: {path} (google layout) loaded into vit_digits: 22 arrays, a zero-initialised head of 10 "
            "classes; position embeddings resampled from a 4x4 to a 6x6 patch grid") in printed
    assert "--freeze-backbone: training the head alone, 330 of " in printed  # 32 x 10 + 10
    tuned = keras.saving.load_model(out / "model.keras")
    assert tuned.input_shape == (None, 24, 24, 3) and tuned.output_shape == (None, 10)
    got, expected = _weights(tuned), _weights(start)
    table = np.asarray(start.get_layer("patch_encoder").position_embedding)
    np.testing.assert_array_equal(got["patch_encoder/position_embedding"],
                                  resample_position_embedding(table, (6, 6), 1, (4, 4)))
    for name, value in expected.items():  # frozen: bit for bit the checkpoint's
        if not name.startswith(("predictions/", "patch_encoder/position_embedding")):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
    assert np.abs(got["predictions/kernel"]).max() > 1e-4  # the head trained from zeros
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["weights"] == path and metrics["freeze_backbone"] is True
    assert metrics["trainable_parameters"] == 330 and metrics["parameters"] == tuned.count_params()


def test_the_checkpoints_head_is_kept_when_the_classes_match(tmp_path, capsys):
    import keras

    start, path = _checkpoint(tmp_path, classes=10)
    out = tmp_path / "run"
    assert train.main([*ONE_EPOCH, "--learning-rate", "1e-12", "--weights", path, "--output-dir", str(out)]) == 0
    assert "loaded into vit_digits: 24 arrays, its head kept (the data have its classes)" in capsys.readouterr().out
    tuned = keras.saving.load_model(out / "model.keras")
    assert tuned.input_shape == (None, 16, 16, 3)  # the checkpoint's resolution by default
    for name, value in _weights(start).items():
        np.testing.assert_allclose(_weights(tuned)[name], value, atol=1e-6, err_msg=name)


@pytest.fixture
def offline_ti16(tmp_path, monkeypatch):
    """The registry's ViT-Ti/16 ImageNet-21k entry, its download failing at once (a closed local port), and an
    empty Keras cache folder."""
    import keras.src.backend.config as keras_config

    from keras_vit.weights import registry

    name = registry.DEFAULTS["imagenet21k"]["ViTTi16"]
    entry = dataclasses.replace(registry.CHECKPOINTS[name], url="http://127.0.0.1:9/Ti_16.npz", sha256=None, size=None)
    monkeypatch.setitem(registry.CHECKPOINTS, name, entry)
    monkeypatch.setattr(keras_config, "_KERAS_DIR", str(tmp_path / "keras_home"))
    (tmp_path / "keras_home").mkdir()
    return entry


def test_a_name_offline_says_where_to_put_the_file(tmp_path, capsys, offline_ti16):
    from keras_vit.weights import registry

    with pytest.raises(SystemExit) as exit_info:
        train.main([*ONE_EPOCH, "--weights", "imagenet21k", "--variant", "ViTTi16", "--image-size", "32",
                    "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    folder = tmp_path / "keras_home" / "models" / "keras_vit"
    assert ("keras-vit-train: error: --weights imagenet21k: the checkpoint augreg/Ti_16-i21k could not be downloaded "
            "from http://127.0.0.1:9/Ti_16.npz (") in err
    assert (f"To work offline, put that file in the folder {folder} as augreg--Ti_16-i21k.npz (it is used from there "
            "without a download), or pass the path of a local .npz or .safetensors file: --weights PATH\n") in err
    assert err.count("\n") == 1 and "Traceback" not in err and not (tmp_path / "run").exists()
    # the folder and name are the ones fetch reads: a file put there is used without a download
    (folder / "augreg--Ti_16-i21k.npz").write_bytes(b"by hand")
    assert registry.fetch(offline_ti16) == str(folder / "augreg--Ti_16-i21k.npz")


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--weights", "imagenet21k", "--init-from", "m.keras"],
         "--weights imagenet21k and --init-from m.keras both give the starting weights; pass one of them"),
        (["--weights", "imagenet21k"], "--weights imagenet21k needs --variant, one of ViTB16, "),
        (["--weights", "imagenet21"], "nor a .npz or .safetensors file; did you mean 'imagenet21k'?"),
        (["--weights", "missing.npz"], "--weights 'missing.npz': no such file"),
        (["--weights", "imagenet21k", "--variant", "ViTTi16", "--image-size", "40"],
         "--image-size must be a multiple of 16 px, the patch size of --weights imagenet21k. Received: --image-size 40"),
        (["--weights", "imagenet21k", "--variant", "ViTTi16", "--hidden-size", "64"],
         "--weights imagenet21k fixes the architecture; drop --hidden-size"),
        (["--weights", "imagenet21k", "--variant", "ViTTi16", "--position-embedding", "sincos_2d"],
         "checkpoints hold learned 1D position embeddings; drop --position-embedding sincos_2d"),
        (["--freeze-backbone"], "--freeze-backbone trains the head alone on pre-trained features: give --weights or "
                                "--init-from"),
    ],
)
def test_bad_weights_flags_exit_2_before_any_download(tmp_path, capsys, monkeypatch, flags, message):
    from keras_vit.weights import registry

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(registry, "fetch", no_download)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        train.main([*ONE_EPOCH, *flags, "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_a_local_file_refuses_architecture_flags_and_junk(tmp_path, capsys):
    _, path = _checkpoint(tmp_path)
    (tmp_path / "junk.npz").write_bytes(b"not an npz")
    for flags, message in (
        (["--weights", path, "--num-layers", "2"], f"--weights {path} takes the architecture of the checkpoint; drop "
                                                   "--num-layers"),
        (["--weights", str(tmp_path / "junk.npz")], "could not be read as a checkpoint"),
        (["--weights", path, "--image-size", "18"], f"--image-size must be a multiple of 4 px, the patch size of "
                                                    f"--weights {path}. Received: --image-size 18"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            train.main([*ONE_EPOCH, *flags, "--output-dir", str(tmp_path / "run")])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
