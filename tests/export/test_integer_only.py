"""Full-integer int8 TFLite files (`full_integer_int8`, the NPU file) are integer-only (issue 11, item 2).

The `int8` mode (the phone-CPU file, issue 45) keeps float32 ops between its int8 matrix products by design; the
last test holds that it does.

Keras' LayerNormalization lowered to a float32 NEG per norm, with a
DEQUANTIZE before and a QUANTIZE after it; keras_vit's LayerNormalization
(`keras_vit/layers/layer_norm.py`) has none. Dtypes are read from LiteRT's
tensor details, independently of `export.tflite.float_ops`.
"""

import collections

import keras
import numpy as np
import pytest

import keras_vit
from export import tflite
from export.signature import ServingGraph

TINY = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "mlp_dim": 64, "input_shape": (16, 16, 3), "classes": 5,
        "classifier_activation": None}
MODELS = {"vit": {"patch_size": 4}, "hybrid": {"patch_size": 1, "resnet_num_layers": (1, 1)}}


def _op_dtypes(content):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in interpreter.get_tensor_details()}
    return [(op["op_name"], {dtypes[i] for i in [*op["inputs"], *op["outputs"]] if i >= 0})
            for op in interpreter._get_ops_details()]


@pytest.fixture(scope="module", params=sorted(MODELS))
def graph(request):
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY, **MODELS[request.param])
    samples = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    with ServingGraph(model, batch_size=1, scores="logits") as g:
        yield g, samples


def test_full_integer_int8_with_float_io_has_no_float_op_between_quantize_and_dequantize(graph):
    g, samples = graph
    ops = _op_dtypes(tflite.convert(g, "full_integer_int8", samples, progress=False))
    names = [name for name, _ in ops]
    assert "NEG" not in names
    floating = [(i, name) for i, (name, types) in enumerate(ops) if types & {"float32", "float16"}]
    # exactly the input QUANTIZE and the output DEQUANTIZE touch a float tensor
    assert [name for _, name in floating] == ["QUANTIZE", "DEQUANTIZE"], floating
    assert collections.Counter(names)["QUANTIZE"] == 1 and collections.Counter(names)["DEQUANTIZE"] == 1
    assert "FULLY_CONNECTED" in names and "SOFTMAX" in names and "GELU" in names


def test_full_integer_int8_probabilities_come_from_a_float_softmax_after_the_output_dequantize():
    """Issue 16: an int8 SOFTMAX outputs multiples of 1/256 (scores summing to 1 only within ~0.02); the
    scores' softmax runs in float32 after the output DEQUANTIZE, every op before it stays integer."""
    from ai_edge_litert.interpreter import Interpreter

    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY, **MODELS["vit"])
    head = model.get_layer("predictions")
    head.set_weights([np.random.default_rng(1).normal(0, 0.5, w.shape).astype("float32") for w in head.get_weights()])
    rng = np.random.default_rng(0)
    samples, images = (rng.uniform(-1, 1, (n, 16, 16, 3)).astype("float32") for n in (8, 16))
    with ServingGraph(model, batch_size=1) as g:  # probabilities, the default
        content = tflite.convert(g, "full_integer_int8", samples, progress=False)
        # integer I/O: an int8 softmax
        plain = tflite.convert(g, "full_integer_int8", samples, io_type="uint8", progress=False)
    with ServingGraph(model, batch_size=1, scores="logits") as g:  # the same int8 graph up to the logits
        logits_file = tflite.convert(g, "full_integer_int8", samples, progress=False)
    ops = _op_dtypes(content)
    assert [name for name, _ in ops[-2:]] == ["DEQUANTIZE", "SOFTMAX"] and ops[-1][1] == {"float32"}
    floating = [name for name, types in ops if types & {"float32", "float16"}]
    assert floating == ["QUANTIZE", "DEQUANTIZE", "SOFTMAX"] and tflite.float_ops(content) == []
    assert "SOFTMAX" in [name for name, _ in _op_dtypes(plain)][-2:]  # then the uint8 output's requantise
    scores, logits = (_run(c, images).astype("float64") for c in (content, logits_file))
    assert np.abs(scores.sum(-1) - 1).max() < 1e-5
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(scores, expected / expected.sum(-1, keepdims=True), atol=1e-5)


def _run(content, images):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    outputs = []
    for image in images:
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])[0])
    return np.asarray(outputs)


@pytest.mark.parametrize("io_type", ["int8", "uint8"])
def test_full_integer_int8_with_integer_io_has_no_float_tensor_at_all(graph, io_type):
    g, samples = graph
    content = tflite.convert(g, "full_integer_int8", samples, io_type=io_type, progress=False)
    ops = _op_dtypes(content)
    assert ops and not [(name, types) for name, types in ops if types & {"float32", "float16"}]
    assert tflite.float_ops(content) == []


def _keras_layer_norm_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Reshape((16, 12))(inputs)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="encoder_norm")(x)
    outputs = keras.layers.Dense(4)(keras.layers.Flatten()(x))
    return keras.Model(inputs, outputs)


def test_a_float_op_in_a_full_integer_int8_file_fails_the_check(tmp_path):
    """Keras' own LayerNormalization, converted straight from the Keras model, leaves a float32 NEG: refused."""
    import tensorflow as tf

    from export.signature import serving_function

    model = _keras_layer_norm_model()
    serve, _ = serving_function(model, batch_size=1)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve)
    archive.write_out(str(tmp_path / "sm"), verbose=False)
    converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm"))
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    samples = np.random.default_rng(1).uniform(-1, 1, (8, 1, 8, 8, 3)).astype("float32")
    converter.representative_dataset = lambda: ([s] for s in samples)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    content = converter.convert()
    with pytest.raises(RuntimeError, match=r"not integer-only: .*1 NEG.*A float op in an int8 file fails the export"):
        tflite.check_integer_only(content, "model.tflite")


def test_a_model_with_keras_layer_norm_exports_integer_only(tmp_path):
    """`.keras` files saved before keras_vit had its own norm hold Keras' class for `encoder_norm`:
    the export's float32 twin swaps in keras_vit's (same variables), so their full_integer_int8 file is integer-only
    too."""
    model = _keras_layer_norm_model()
    samples = np.random.default_rng(1).uniform(-1, 1, (8, 8, 8, 3)).astype("float32")
    path = tmp_path / "model.tflite"
    tflite.export_tflite(model, str(path), quantization="full_integer_int8", representative_data=samples,
                         progress=False)
    content = path.read_bytes()
    assert tflite.float_ops(content) == [] and "NEG" not in tflite.op_names(content)
    twin = ServingGraph(model).model
    assert type(twin.get_layer("encoder_norm")).__module__ == "keras_vit.layers.normalization"
    x = samples[:4]
    np.testing.assert_allclose(np.asarray(twin(x)), np.asarray(model(x)), atol=1e-5)


def test_the_int8_file_is_not_integer_only_by_design(graph):
    """`int8` is the phone-CPU file (issue 45): int8 in and out of its matrix products only; SOFTMAX and GELU stay
    float32, with QUANTIZE / DEQUANTIZE between, and its input and output are float32. An integer-only NPU needs
    `full_integer_int8` (or `int8_mixed16`), whose checks are above."""
    g, samples = graph
    content = tflite.convert(g, "int8", samples, progress=False)
    ops = _op_dtypes(content)
    names = [name for name, _ in ops]
    assert {"QUANTIZE", "DEQUANTIZE"} <= set(names)
    assert all(types == {"float32"} for name, types in ops if name in ("SOFTMAX", "GELU")), ops
    assert any(name == "SOFTMAX" for name in names) and any(name == "GELU" for name in names)
    int8_matmuls = [name for name, types in ops if name in ("FULLY_CONNECTED", "BATCH_MATMUL") and "int8" in types]
    assert "FULLY_CONNECTED" in int8_matmuls and "BATCH_MATMUL" in int8_matmuls, ops
    assert tflite.float_ops(content) != []
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    assert [d["dtype"] for d in (*interpreter.get_input_details(), *interpreter.get_output_details())] \
        == [np.float32, np.float32]
