"""keras_vit.weights.convert and the keras-vit-convert CLI."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import convert
from keras_vit.weights.convert import main
from tests.weights import reference


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    arrays = reference.google_checkpoint(9, representation=24)
    path = tmp_path_factory.mktemp("conv") / "tiny.npz"
    np.savez(path, **arrays)
    return str(path), arrays


def _x(size=16):
    return np.random.default_rng(1).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def test_convert_to_weights_h5_reloads_with_the_printed_config(tmp_path, checkpoint):
    path, arrays = checkpoint
    out, config, report = convert(path, tmp_path / "tiny.weights.h5", classifier_activation=None)
    assert report.head == "loaded" and config["representation_size"] == 24 and config["classes"] == 5
    model = keras_vit.VisionTransformer(**config, weights=out)
    np.testing.assert_allclose(model.predict(_x(), verbose=0), reference.forward(arrays, _x(), layers=2), atol=1e-5)


def test_convert_to_keras_at_a_higher_resolution(tmp_path, checkpoint):
    path, _ = checkpoint
    out, config, report = convert(path, tmp_path / "tiny32.keras", image_size=32, classes=3)
    assert report.resampled == ((4, 4), (8, 8)) and report.head == "reset"
    model = keras.saving.load_model(out)
    assert model.input_shape == (None, 32, 32, 3) and model.output_shape == (None, 3)


def test_cli_success_and_errors(tmp_path, checkpoint, capsys):
    path, _ = checkpoint
    out = tmp_path / "a.weights.h5"
    assert main([path, str(out), "--image-size", "16x24"]) == 0
    printed = capsys.readouterr().out
    assert "Wrote" in printed and "input_shape=(16, 24, 3)" in printed
    assert main([path, str(out)]) == 2
    assert "exists; pass --overwrite to replace it" in capsys.readouterr().err
    assert main([path, str(tmp_path / "a.h5")]) == 2
    assert "must end in '.weights.h5' or '.keras'" in capsys.readouterr().err
    assert main([str(tmp_path / "none.npz"), str(tmp_path / "b.keras")]) == 2
    assert "Checkpoint file not found" in capsys.readouterr().err
    assert main([path, str(tmp_path / "c.keras"), "--image-size", "15"]) == 2
    assert "multiples of `patch_size`" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main([path, str(tmp_path / "d.keras"), "--image-size", "big"])
    assert e.value.code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.weights.h5"]  # nothing half-written


def test_console_script_is_installed(tmp_path, checkpoint):
    path, _ = checkpoint
    exe = os.path.join(os.path.dirname(sys.executable), "keras-vit-convert")
    result = subprocess.run([exe, path, str(tmp_path / "e.keras"), "--no-top"], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "head none" in result.stdout


def test_cli_bad_num_heads_and_unwritable_output_exit_2(tmp_path, checkpoint, capsys):
    path, _ = checkpoint
    assert main([path, str(tmp_path / "a.keras"), "--num-heads", "0"]) == 2
    assert "--num-heads must be a positive int. Received: --num-heads 0" in capsys.readouterr().err
    assert main([path, "/proc/nowhere/a.keras"]) == 2
    assert "keras-vit-convert: error:" in capsys.readouterr().err
