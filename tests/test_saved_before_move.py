"""`.keras` files saved by the code before issue 28 moved the modules into folders still load, with their
registered names, optimizer state and outputs (tests/data/saved_before_issue28/make.py made them)."""

import pathlib

import numpy as np
import pytest

import keras
import keras_vit  # noqa: F401 (registers the keras_vit classes, as a user's `import keras_vit` does)

DATA = pathlib.Path(__file__).resolve().parent / "data" / "saved_before_issue28"


@pytest.fixture(scope="module")
def outputs():
    return dict(np.load(DATA / "outputs.npz"))


def test_a_classifier_with_its_preprocessing_class_names_and_optimizer_state_loads(outputs):
    model = keras.saving.load_model(DATA / "classifier.keras")
    np.testing.assert_allclose(model.predict(outputs["images"], verbose=0), outputs["classifier"], atol=1e-6)
    assert type(model.optimizer).__module__.startswith("keras_vit")
    assert type(model.optimizer).__name__ == "AdamW"
    assert int(model.optimizer.iterations.numpy()) == 2  # one epoch of 2 batches before the save
    assert model.get_layer("predictions").class_names == ["cat", "dog", "fox"]


def test_a_hybrid_loads(outputs):
    model = keras.saving.load_model(DATA / "hybrid.keras")
    np.testing.assert_allclose(model.predict(outputs["hybrid_images"], verbose=0), outputs["hybrid"], atol=1e-5)


def test_a_masked_patch_prediction_model_loads(outputs):
    model = keras.saving.load_model(DATA / "pretraining.keras")
    assert type(model).__name__ == "MaskedPatchPrediction"
    inputs = {"images": outputs["images"] / 127.5 - 1, "corruption": outputs["corruption"],
              "source": outputs["source"]}
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)), outputs["pretraining"], atol=1e-5)
