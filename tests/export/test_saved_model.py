import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from export import export_saved_model
from export.verify import reference_outputs


def test_signature_names_dynamic_batch_and_values(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = export_saved_model(model, str(tmp_path / "sm"))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert list(serve.structured_input_signature[1]) == ["images"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, 16, 16, 3]
    for n in (1, 5):
        out = serve(images=tf.constant(images[:n]))
        assert list(out) == ["predictions"]
        np.testing.assert_allclose(out["predictions"].numpy(), reference_outputs(model, images[:n]), atol=1e-5)


def test_reloads_as_tfsmlayer(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = export_saved_model(model, str(tmp_path / "sm"))
    layer = keras.layers.TFSMLayer(path, call_endpoint="serving_default")
    out = layer(images[:3])["predictions"]
    np.testing.assert_allclose(np.asarray(out), reference_outputs(model, images[:3]), atol=1e-5)


def test_include_preprocessing_takes_raw_pixels(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = export_saved_model(model, str(tmp_path / "sm"), include_preprocessing=True)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    raw = (images[:4] + 1.0) * 127.5
    np.testing.assert_allclose(serve(pixels=tf.constant(raw))["predictions"].numpy(), reference_outputs(model, images[:4]), atol=1e-4)


def test_existing_output_is_kept_without_overwrite(trained_vit, tmp_path):
    model = trained_vit[0]
    target = tmp_path / "sm"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"exists; pass overwrite=True"):
        export_saved_model(model, str(target))
    assert os.listdir(target) == ["keep.txt"]
    export_saved_model(model, str(target), overwrite=True)
    assert "saved_model.pb" in os.listdir(target)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".tmp-")]
