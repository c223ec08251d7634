import numpy as np
import pytest
import tensorflow as tf

import keras_vit


def test_scales_0_255_to_minus1_1():
    x = np.array([[0, 127.5, 255]], "float32")
    np.testing.assert_allclose(keras_vit.preprocess_input(x), [[-1.0, 0.0, 1.0]])


def test_integer_input_is_not_truncated():
    out = keras_vit.preprocess_input(np.array([0, 128, 255], "uint8"))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [-1.0, 128 / 127.5 - 1, 1.0], atol=1e-6)


def test_list_input_and_bad_input():
    np.testing.assert_allclose(keras_vit.preprocess_input([0, 255]), [-1.0, 1.0])
    with pytest.raises(ValueError, match=r"`x` must be an array or tensor of pixels in \[0, 255\]. Received: x of type str"):
        keras_vit.preprocess_input("abc")


@pytest.mark.tensorflow_only  # a tf.Tensor in
def test_tensor_input():
    out = keras_vit.preprocess_input(tf.constant([[0.0, 255.0]]))
    np.testing.assert_allclose(out.numpy(), [[-1.0, 1.0]])


def test_decode_predictions_checks_shape():
    with pytest.raises(ValueError, match=r"shape \(batch, 1000\). Received: preds with shape \(2, 10\)"):
        keras_vit.decode_predictions(np.zeros((2, 10)))


def test_decode_predictions_uses_keras_class_index(monkeypatch, tmp_path):
    """Keras downloads the class index through get_file; here a local file stands in for it."""
    import json

    from keras.src.applications import imagenet_utils  # where Keras keeps CLASS_INDEX and calls get_file

    index = {str(i): [f"n{i:08d}", f"class_{i}"] for i in range(1000)}
    path = tmp_path / "imagenet_class_index.json"
    path.write_text(json.dumps(index))
    monkeypatch.setattr(imagenet_utils, "CLASS_INDEX", None)
    monkeypatch.setattr(imagenet_utils.file_utils, "get_file", lambda *a, **k: str(path))
    preds = np.zeros((2, 1000), "float32")
    preds[0, 7], preds[0, 3], preds[1, 999] = 0.9, 0.1, 1.0
    decoded = keras_vit.decode_predictions(preds, top=2)
    assert decoded[0][0][:2] == ("n00000007", "class_7") and decoded[0][1][1] == "class_3"
    assert decoded[1][0][1] == "class_999"
