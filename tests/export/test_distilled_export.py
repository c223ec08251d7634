"""A distilled ViT (DeiT's distillation token and two heads, issue 46) exports with both heads averaged, verified.

The student is trained for a few seconds on digits against the export tests' tiny ViT as its teacher
(`keras_vit.distillation.Distiller`); then `export_all` writes and verifies its files like any other model's.
"""

import json

import keras
import numpy as np
import pytest

import keras_vit
from export import export_all
from keras_vit import data
from keras_vit.distillation import Distiller
from keras_vit.training import compile_model

pytestmark = [pytest.mark.export, pytest.mark.tensorflow_only]


@pytest.fixture(scope="module")
def distilled(trained_vit):
    teacher = trained_vit[0]
    keras.utils.set_random_seed(0)
    train = data.digits("train", image_size=16, batch_size=64, seed=0)
    student = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                          input_shape=(16, 16, 3), classes=10, classifier_activation=None,
                                          distillation_token=True, name="tiny_deit")
    distiller = Distiller(student, teacher)
    compile_model(distiller, total_steps=15 * int(train.cardinality()), learning_rate=3e-3, from_logits=True)
    distiller.fit(train, epochs=15, verbose=0, shuffle=False)
    return student, trained_vit[2], trained_vit[3]


def test_a_distilled_model_exports_with_both_heads_and_verifies(distilled, tmp_path):
    student, images, labels = distilled
    accuracy = float((student.predict(images, verbose=0).argmax(1) == labels).mean())
    assert accuracy >= 0.85, accuracy  # a trained model, so the int8 file's agreement means something
    export_all(student, tmp_path / "out", formats=("saved_model", "tflite"), quantizations=["float32", "int8"],
               calibration_data="digits", measure_latency=False, mediapipe=False)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    artifacts = {a["name"]: a for a in report["artifacts"]}
    assert set(artifacts) == {"saved_model", "model_float32.tflite", "model_int8.tflite"}
    assert all(a["passed"] for a in artifacts.values()), artifacts
    # The file's scores are the softmax of the two heads' mean: never the class head alone.
    scores = _litert(tmp_path / "out" / "model_float32.tflite", images[:16])
    both = keras.ops.convert_to_numpy(Distiller(student, _any_teacher())(images[:16]))
    mean, cls_only = _softmax(both.mean(1)), _softmax(both[:, 0])
    np.testing.assert_allclose(scores, mean, atol=1e-5)
    assert np.abs(scores - cls_only).max() > 1e-2


def _litert(path, images):
    """The file's outputs one image at a time, as an app runs it (LiteRT's Interpreter)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    rows = []
    for image in images:
        interpreter.set_tensor(inp["index"], image[None])
        interpreter.invoke()
        rows.append(interpreter.get_tensor(out["index"])[0])
    return np.stack(rows)


def _softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


def _any_teacher():
    return keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
