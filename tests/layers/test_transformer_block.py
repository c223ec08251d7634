import json

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from keras_vit.layers import TransformerBlock


def np_layer_norm(x, gamma, beta, eps):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def np_softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_block(block, x, eps=1e-6, approximate=False):
    """Eq. 2-3 of arXiv:2010.11929 in NumPy (float64) from the layer's weights."""
    w = {v.path.split("/", 1)[1]: v.numpy().astype("float64") for v in block.weights}
    x = x.astype("float64")
    y = np_layer_norm(x, w["norm_1/gamma"], w["norm_1/beta"], eps)
    q = np.einsum("btd,dhk->bhtk", y, w["attention/query/kernel"]) + w["attention/query/bias"].transpose(0, 1)[None, :, None, :]
    k = np.einsum("btd,dhk->bhtk", y, w["attention/key/kernel"]) + w["attention/key/bias"][None, :, None, :]
    v = np.einsum("btd,dhk->bhtk", y, w["attention/value/kernel"]) + w["attention/value/bias"][None, :, None, :]
    probs = np_softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
    heads = probs @ v
    attn = np.einsum("bhtk,hkd->btd", heads, w["attention/attention_output/kernel"]) + w["attention/attention_output/bias"]
    x = x + attn
    y = np_layer_norm(x, w["norm_2/gamma"], w["norm_2/beta"], eps)
    h = y @ w["mlp_dense_1/kernel"] + w["mlp_dense_1/bias"]
    if approximate:
        h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    else:
        h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
    return x + h @ w["mlp_dense_2/kernel"] + w["mlp_dense_2/bias"], probs


def _randomise(block, seed=0):
    rng = np.random.default_rng(seed)
    for v in block.weights:
        v.assign(rng.normal(scale=0.3, size=v.shape).astype("float32"))


@pytest.mark.parametrize("approximate", [False, True])
def test_equations_2_3_against_numpy(approximate):
    x = np.random.default_rng(1).normal(size=(2, 5, 16)).astype("float32")
    block = TransformerBlock(num_heads=4, mlp_dim=24, approximate_gelu=approximate)
    block.build(x.shape)
    _randomise(block)
    expected, expected_probs = np_block(block, x, approximate=approximate)
    got, probs = block(x, return_attention_scores=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), expected, atol=2e-4, rtol=1e-4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(probs), expected_probs, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(probs).sum(-1), 1.0, atol=1e-5)


def test_exact_and_tanh_gelu_differ():
    """Guards the choice of GELU form: the two differ measurably on the same weights."""
    x = np.random.default_rng(2).normal(size=(1, 4, 16)).astype("float32")
    exact = TransformerBlock(4, 32)
    exact.build(x.shape)
    _randomise(exact)
    approx = TransformerBlock(4, 32, approximate_gelu=True)
    approx.build(x.shape)
    for a, b in zip(approx.weights, exact.weights):
        a.assign(b)
    assert np.abs(keras.ops.convert_to_numpy(exact(x)) - keras.ops.convert_to_numpy(approx(x))).max() > 1e-5


def test_layer_norm_epsilon_is_reference_value():
    block = TransformerBlock(2, 8)
    block.build((None, 3, 8))
    assert block.norm_1.epsilon == 1e-6 and block.norm_2.epsilon == 1e-6


def test_parameter_count_matches_formula():
    d, m = 32, 64
    block = TransformerBlock(num_heads=4, mlp_dim=m)
    block.build((None, 7, d))
    assert block.count_params() == 2 * 2 * d + 4 * (d * d + d) + (d * m + m) + (m * d + d)


def test_shapes_symbolic_eager_and_batches():
    block = TransformerBlock(2, 8)
    assert tuple(block(keras.Input((5, 8))).shape) == (None, 5, 8)
    out, scores = TransformerBlock(2, 8)(keras.Input((5, 8)), return_attention_scores=True)
    assert tuple(out.shape) == (None, 5, 8) and tuple(scores.shape) == (None, 2, 5, 5)
    assert block.compute_output_shape((None, 5, 8)) == (None, 5, 8)
    for batch in (1, 3):
        assert block(np.zeros((batch, 5, 8), "float32")).shape == (batch, 5, 8)


def test_stochastic_depth_drops_whole_examples():
    """With rate close to 1, most examples pass through unchanged (both branches dropped)."""
    x = np.random.default_rng(3).normal(size=(64, 3, 8)).astype("float32")
    block = TransformerBlock(2, 8, stochastic_depth_rate=0.9)
    out = keras.ops.convert_to_numpy(block(x, training=True))
    unchanged = np.all(np.isclose(out, x), axis=(1, 2))
    assert 0.6 < unchanged.mean() < 0.95  # expected 0.81 = 0.9 * 0.9
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(block(x)), keras.ops.convert_to_numpy(block(x, training=False)))


def test_dropout_only_in_training():
    x = np.random.default_rng(5).normal(size=(2, 3, 8)).astype("float32")
    block = TransformerBlock(2, 8, dropout_rate=0.5, attention_dropout_rate=0.5)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(block(x)), keras.ops.convert_to_numpy(block(x, training=False)))
    assert not np.allclose(keras.ops.convert_to_numpy(block(x, training=True)), keras.ops.convert_to_numpy(block(x)))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"num_heads": 0, "mlp_dim": 8}, r"`num_heads` must be a positive int. Received: num_heads=0"),
        ({"num_heads": 2, "mlp_dim": -1}, r"Received: mlp_dim=-1"),
        ({"num_heads": 2, "mlp_dim": 8, "dropout_rate": 1.5}, r"Received: dropout_rate=1.5"),
        ({"num_heads": 2, "mlp_dim": 8, "attention_dropout_rate": -1}, r"Received: attention_dropout_rate=-1"),
        ({"num_heads": 2, "mlp_dim": 8, "stochastic_depth_rate": 1.0}, r"Received: stochastic_depth_rate=1.0"),
        ({"num_heads": 2, "mlp_dim": 8, "layer_norm_epsilon": 0}, r"Received: layer_norm_epsilon=0"),
        ({"num_heads": 2, "mlp_dim": 8, "approximate_gelu": "tanh"}, r"`approximate_gelu` must be True or False"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerBlock(**kwargs)


def test_hidden_size_not_divisible_by_heads():
    with pytest.raises(ValueError, match=r"hidden_size must be divisible by num_heads. Received: hidden_size=10, num_heads=4"):
        TransformerBlock(4, 8).build((None, 3, 10))


@pytest.mark.parametrize("name", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision(policy, name):
    policy(name)
    block = TransformerBlock(2, 8)
    out, scores = block(np.ones((2, 3, 8), "float32"), return_attention_scores=True)
    assert keras.backend.standardize_dtype(out.dtype) == name.split("_")[1]
    assert all(w.dtype == "float32" for w in block.weights)


def test_config_round_trip():
    block = TransformerBlock(3, 12, dropout_rate=0.1, attention_dropout_rate=0.2, stochastic_depth_rate=0.3,
                             layer_norm_epsilon=1e-5, approximate_gelu=True)
    config = block.get_config()
    assert json.dumps(TransformerBlock.from_config(config).get_config()) == json.dumps(config)
    assert config["approximate_gelu"] is True and config["layer_norm_epsilon"] == 1e-5


@pytest.mark.export
@pytest.mark.tensorflow_only
@pytest.mark.parametrize("approximate", [False, True])
def test_gelu_exports_to_builtin_tflite_and_onnx(tmp_path, approximate):
    """docs/traps.md: Keras' exact GELU becomes Erfc (tf2onnx fails) or a Flex op in TFLite."""
    import onnxruntime as ort
    import tf2onnx
    from ai_edge_litert.interpreter import Interpreter

    inputs = keras.Input((5, 16))
    model = keras.Model(inputs, TransformerBlock(4, 32, approximate_gelu=approximate)(inputs))
    x = np.random.default_rng(4).normal(size=(2, 5, 16)).astype("float32")
    expected = model.predict(x, verbose=0)
    model.export(str(tmp_path / "sm"), verbose=False)

    tflite = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm")).convert()
    interpreter = Interpreter(model_content=tflite)
    op_names = {op["op_name"] for op in interpreter._get_ops_details()}
    assert "GELU" in op_names
    assert not any("Flex" in name or name == "CUSTOM" for name in op_names), op_names
    runner = interpreter.get_signature_runner()
    (got,) = runner(**{runner.get_input_details().popitem()[0]: x[:1]}).values()
    np.testing.assert_allclose(got, expected[:1], atol=1e-4)

    spec = (tf.TensorSpec((None, 5, 16), tf.float32, name="x"),)
    proto, _ = tf2onnx.convert.from_function(tf.function(lambda t: model(t)), input_signature=spec, opset=17)
    assert not {"Erfc", "PartitionedCall"} & {n.op_type for n in proto.graph.node}
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, atol=1e-4)
