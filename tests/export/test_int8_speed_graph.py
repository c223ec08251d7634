"""Full-integer int8 files (`full_integer_int8`) with every attention BATCH_MATMUL on XNNPACK (issue 11, item 2, speed).

TensorFlow's int8 converter gives the attention matmuls' second operand (k^T, v) an asymmetric
zero point; LiteRT 2.3's XNNPACK then leaves the op to LiteRT's builtin int8 BATCH_MATMUL, which
took 32 of ViT-Ti/16's 38 ms (benchmarks/findings/int8-symmetric-matmul.md).
`export.int8_graph.symmetric_matmul_operands`
gives those operands zero point 0. What XNNPACK takes is read with `export.profile` (LiteRT's own
delegate placement), zero points from LiteRT's tensor details; no timing is asserted.
"""

from unittest import mock

import keras
import numpy as np
import pytest

import keras_vit
from export import tflite
from export.int8_graph import symmetric_matmul_operands
from export.profile import tflite_profile
from export.signature import ServingGraph
from export.tolerances import TOLERANCES, compare

TINY = {"patch_size": 4, "hidden_size": 32, "num_layers": 2, "num_heads": 2, "mlp_dim": 64,
        "input_shape": (16, 16, 3), "classes": 5, "classifier_activation": None}


def _interpreter(content):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=content)
    interpreter.allocate_tensors()
    return interpreter


def _quantisation(content):
    """{tensor index: (scales, zero points)} and the ops as (name, inputs, outputs), read by LiteRT."""
    interpreter = _interpreter(content)
    params = {t["index"]: (tuple(t["quantization_parameters"]["scales"]), tuple(t["quantization_parameters"]["zero_points"]))
              for t in interpreter.get_tensor_details()}
    ops = [(op["op_name"], [i for i in op["inputs"] if i >= 0], list(op["outputs"])) for op in interpreter._get_ops_details()]
    return params, ops


def _outputs(content, images):
    interpreter = _interpreter(content)
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    results = []
    for image in images:
        interpreter.set_tensor(inp["index"], image[None].astype("float32"))
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0])
    return np.stack(results)


def _batch_matmul_on_xnnpack(content, tmp_path):
    path = tmp_path / "model.tflite"
    path.write_bytes(content)
    profile = tflite_profile(str(path), measure_latency=False)
    row = next(r for r in profile["ops"] if r["op"] == "BATCH_MATMUL")
    return row, profile["xnnpack_partitions"]


@pytest.fixture(scope="module")
def int8_file():
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY)
    samples = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    with ServingGraph(model, batch_size=1, scores="logits") as graph, \
            mock.patch("export.int8_graph.symmetric_matmul_operands", lambda content: (content, 0)):
        return tflite.convert(graph, "full_integer_int8", samples, progress=False)  # TF's converter's, not rewritten


def test_export_convert_applies_the_rewrite(tmp_path):
    """`export.tflite.convert` (so export_tflite, export_all and the CLI) writes full_integer_int8 files with every
    attention BATCH_MATMUL on XNNPACK."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY)
    samples = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    with ServingGraph(model, batch_size=1, scores="logits") as graph:
        content = tflite.convert(graph, "full_integer_int8", samples, progress=False)
    params, ops = _quantisation(content)
    seconds = [inputs[1] for name, inputs, _ in ops if name == "BATCH_MATMUL"]
    assert len(seconds) == 4 and all(params[t][1] == (0,) for t in seconds)
    row, _ = _batch_matmul_on_xnnpack(content, tmp_path)
    assert row["off_delegate"] == 0
    assert symmetric_matmul_operands(content)[1] == 0  # already rewritten


def test_converter_leaves_asymmetric_matmul_operands_that_xnnpack_declines(int8_file, tmp_path):
    # the trap itself: without the rewrite XNNPACK declines the attention matmuls with a nonzero zero point
    params, ops = _quantisation(int8_file)
    seconds = [inputs[1] for name, inputs, _ in ops if name == "BATCH_MATMUL"]
    assert len(seconds) == 4  # q.k^T and softmax.v in each of the 2 blocks
    row, _ = _batch_matmul_on_xnnpack(int8_file, tmp_path)
    asymmetric = sum(params[t][1] != (0,) for t in seconds)
    assert asymmetric > 0 and row["off_delegate"] == asymmetric


def test_symmetric_operands_put_every_batch_matmul_on_xnnpack(int8_file, tmp_path):
    content, changed = symmetric_matmul_operands(int8_file)
    assert len(content) == len(int8_file) and changed > 0
    params, ops = _quantisation(content)
    for name, inputs, _ in ops:
        if name == "BATCH_MATMUL":
            assert params[inputs[1]][1] == (0,)
    row, partitions = _batch_matmul_on_xnnpack(content, tmp_path)
    assert row["xnnpack"] == row["count"] == 4 and row["off_delegate"] == 0
    _, partitions_before = _batch_matmul_on_xnnpack(int8_file, tmp_path)
    assert partitions < partitions_before
    assert tflite.float_ops(content) == []  # still integer-only


@pytest.mark.parametrize("io_type", ["int8", "uint8"])
def test_integer_io_files_get_every_batch_matmul_on_xnnpack_too(io_type, tmp_path):
    keras.utils.set_random_seed(0)
    samples = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    with ServingGraph(keras_vit.VisionTransformer(**TINY), batch_size=1, scores="logits") as graph:
        # rewritten by convert
        rewritten = tflite.convert(graph, "full_integer_int8", samples, io_type=io_type, progress=False)
    row, _ = _batch_matmul_on_xnnpack(rewritten, tmp_path)
    assert row["off_delegate"] == 0 and symmetric_matmul_operands(rewritten)[1] == 0
    interpreter = _interpreter(rewritten)
    assert [d["dtype"].__name__ for d in interpreter.get_input_details()] == [io_type]


def test_copy_ops_keep_equal_input_and_output_parameters(int8_file):
    # RESHAPE / TRANSPOSE copy int8 values: a rewrite that changed one side only would scale them wrongly
    params, ops = _quantisation(symmetric_matmul_operands(int8_file)[0])
    copies = [(inputs[0], outputs[0]) for name, inputs, outputs in ops if name in ("RESHAPE", "TRANSPOSE")]
    assert copies and all(params[a] == params[b] for a, b in copies)


def test_the_new_range_holds_the_calibrated_one(int8_file):
    before, ops = _quantisation(int8_file)
    after, _ = _quantisation(symmetric_matmul_operands(int8_file)[0])
    changed = [t for t in before.keys() & after.keys() if before[t] != after[t]]  # LiteRT may add tensors
    assert changed
    for t in changed:
        (scale,), (zero,) = before[t]
        (new_scale,), (new_zero,) = after[t]
        low, high = scale * (-128 - zero), scale * (127 - zero)
        slack = 1e-6 * max(-low, high)  # the new scale is stored as float32
        assert new_zero == 0 and -128 * new_scale <= low + slack and high <= 127 * new_scale + slack
        assert new_scale <= 2 * scale * (1 + 1e-6)  # at most one bit of resolution lost


def test_rewrite_is_idempotent_and_leaves_float_files_alone(int8_file):
    once, _ = symmetric_matmul_operands(int8_file)
    twice, changed = symmetric_matmul_operands(once)
    assert changed == 0 and twice == once
    keras.utils.set_random_seed(0)
    with ServingGraph(keras_vit.VisionTransformer(**TINY), batch_size=1, scores="logits") as graph:
        float_file = tflite.convert(graph, "float32")
    assert symmetric_matmul_operands(float_file) == (float_file, 0)


@pytest.mark.parametrize("content", [b"", "model.tflite", b"\x00" * 64])
def test_bad_content_is_refused_by_name(content):
    with pytest.raises(ValueError, match=r"`content` must be the bytes of a \.tflite file"):
        symmetric_matmul_operands(content)


def test_trained_model_keeps_the_int8_bar_with_symmetric_operands(trained_vit):
    # the tests' digits ViT on 96 held-out scans: the rewritten file is held to the full_integer_int8 bar, and stays
    # as close to Keras as TensorFlow's own full-integer int8 file
    model, _, images, labels = trained_vit
    with ServingGraph(model, batch_size=1, scores="logits") as graph, \
            mock.patch("export.int8_graph.symmetric_matmul_operands", lambda content: (content, 0)):
        plain = tflite.convert(graph, "full_integer_int8", images[:64], progress=False)
    symmetric, changed = symmetric_matmul_operands(plain)
    assert changed > 0
    reference = np.asarray(model.predict(images, verbose=0))
    before = compare(reference, _outputs(plain, images), labels)
    after = compare(reference, _outputs(symmetric, images), labels)
    bar = TOLERANCES["full_integer_int8"]
    assert after["decisive_top1_agreement"] >= bar["decisive_top1_agreement"]
    assert after["accuracy_drop"] <= bar["accuracy_drop"]
    assert after["relative_max_abs_diff"] <= 1.5 * before["relative_max_abs_diff"]


def test_benchmark_times_each_op_where_the_graph_runs_it(tmp_path):
    # smoke test of `python -m benchmarks.int8_graph` on a tiny model: structure and op placement, no timing
    from benchmarks.int8_graph import markdown, measure

    rows, extra = measure("tiny", 16, rounds=1, runs=1, folder=str(tmp_path))
    by_file = {r["file"]: r for r in rows}
    assert list(by_file) == ["float32", "full_integer_int8", "full_integer_int8, symmetric matmul operands"]
    assert "BATCH_MATMUL" in by_file["full_integer_int8"]["off"]
    assert "BATCH_MATMUL" not in by_file["full_integer_int8, symmetric matmul operands"]["off"]
    for row in rows:  # every op of the file is timed once, on XNNPACK exactly where the profile puts it
        assert sum(count for count, _ in row["per_op"].values()) == row["ops"]
        assert sum(count for (_, where), (count, _) in row["per_op"].items() if where == "xnnpack") == row["xnnpack_ops"]
    assert extra["tensors_rewritten"] > 0
    assert "| full_integer_int8, symmetric matmul operands |" in markdown(rows, extra)
