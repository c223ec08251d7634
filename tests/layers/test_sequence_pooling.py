import numpy as np
import keras
from keras import ops
import pytest

from keras_vit.layers import SequencePooling

X = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)


def test_modes():
    np.testing.assert_array_equal(ops.convert_to_numpy(SequencePooling("token")(X)), X[:, 0])
    np.testing.assert_array_equal(ops.convert_to_numpy(SequencePooling("avg")(X)), X[:, 1:].mean(1))
    np.testing.assert_array_equal(ops.convert_to_numpy(SequencePooling("max")(X)), X[:, 1:].max(1))
    np.testing.assert_array_equal(ops.convert_to_numpy(SequencePooling("avg", class_token=False)(X)), X.mean(1))
    assert SequencePooling("avg").compute_output_shape((None, 4, 3)) == (None, 3)


def test_errors():
    with pytest.raises(ValueError, match=r"`mode` must be one of 'token', 'avg', 'max', 'tokens'. Received: mode='mean'"):
        SequencePooling("mean")
    with pytest.raises(ValueError, match=r"needs a class token"):
        SequencePooling("token", class_token=False)
    with pytest.raises(ValueError, match=r"expects tokens of shape \(batch, seq_len, hidden_size\)"):
        SequencePooling("avg")(np.zeros((2, 3), "float32"))


def test_config_round_trip():
    layer = SequencePooling("max", class_token=False)
    assert SequencePooling.from_config(layer.get_config()).get_config() == layer.get_config()
