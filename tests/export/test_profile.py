"""export.profile: op counts and tensor types against the flatbuffer read independently, XNNPACK's share, bad input."""

import collections
import json

import numpy as np
import pytest

from export import export_tflite
from export import __main__ as cli
from export.profile import format_profile, off_delegate_summary, tflite_profile

pytestmark = pytest.mark.export

SHAPE_OPS = ("SHAPE", "GATHER", "REDUCE_PROD", "PACK")


def flatbuffer_ops(path):
    """[(op name, input dtypes, output dtypes)] of subgraph 0, read with TensorFlow's flatbuffer schema (not LiteRT)."""
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(f.read(), 0))
    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    types = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    graph = model.subgraphs[0]
    ops = []
    for op in graph.operators:
        code = model.operatorCodes[op.opcodeIndex]
        dtypes = lambda ids: [types[graph.tensors[i].type] for i in ids if i != -1]  # noqa: E731
        ops.append((names[max(code.builtinCode, code.deprecatedBuiltinCode)], dtypes(op.inputs), dtypes(op.outputs)))
    return ops


@pytest.fixture(scope="module")
def files(trained_vit, tmp_path_factory):
    """The tiny trained ViT as float32 with a dynamic batch, float32 at batch 1, and at batch 1 (float I/O) the
    full-integer int8 file (TensorFlow's converter) and the int8 file (LiteRT Quantizer, float32 between its int8
    matrix products)."""
    model, _, images, _ = trained_vit
    folder = tmp_path_factory.mktemp("profile")
    paths = {}
    for key, quantization, batch_size in (("float32_dynamic", "float32", None), ("float32_b1", "float32", 1),
                                          ("full_integer_int8_b1", "full_integer_int8", 1), ("int8_b1", "int8", 1)):
        paths[key] = str(folder / f"{key}.tflite")
        export_tflite(model, paths[key], quantization=quantization, representative_data=images, batch_size=batch_size,
                      progress=False)
    return paths


@pytest.mark.parametrize("key", ["float32_dynamic", "float32_b1", "full_integer_int8_b1", "int8_b1"])
def test_counts_and_tensor_types_equal_the_flatbuffer(files, key):
    profile = tflite_profile(files[key], measure_latency=False)
    ops = flatbuffer_ops(files[key])
    assert profile["num_ops"] == len(ops)
    rows = {row["op"]: row for row in profile["ops"]}
    assert {op: row["count"] for op, row in rows.items()} == dict(collections.Counter(name for name, _, _ in ops))
    for name, row in rows.items():
        assert row["input_types"] == sorted({t for n, ins, _ in ops if n == name for t in ins}), name
        assert row["output_types"] == sorted({t for n, _, outs in ops if n == name for t in outs}), name
        assert row["xnnpack"] + row["off_delegate"] == row["count"] and row["time_ms"] is None  # not measured
    assert profile["xnnpack_ops"] + len(profile["off_delegate"]) == len(ops)
    for off in profile["off_delegate"]:  # each op left to the builtin kernels is the op at that index in the file
        assert (off["op"], off["input_types"], off["output_types"]) == ops[off["index"]] and off["reason"]
    assert json.loads(json.dumps(profile)) == profile


def test_full_integer_int8_file_shows_quantize_dequantize_and_what_xnnpack_declines(files):
    profile = tflite_profile(files["full_integer_int8_b1"], measure_latency=False)
    ops = flatbuffer_ops(files["full_integer_int8_b1"])
    rows = {row["op"]: row for row in profile["ops"]}
    assert rows["QUANTIZE"]["count"] >= 1 and rows["DEQUANTIZE"]["count"] >= 1
    floats = [n for n, ins, outs in ops if n not in ("QUANTIZE", "DEQUANTIZE") and "float32" in ins + outs]
    # the only float op is the scores' SOFTMAX after the output DEQUANTIZE (issue 16), which the integer-only
    # rule (export.tflite.float_ops) does not count
    assert floats == ["SOFTMAX"] and [n for n, _, _ in ops[-2:]] == ["DEQUANTIZE", "SOFTMAX"]
    assert profile["float_ops_in_quantised_graph"] == 0
    # what XNNPACK leaves here are int8 ops, each with its reason
    assert all("int8" in off["output_types"] for off in profile["off_delegate"])
    assert all(off["reason"].startswith("quantised (int8)") for off in profile["off_delegate"])


def test_float_neg_of_keras_layer_norm_is_counted_in_a_full_integer_int8_file(trained_vit, tmp_path):
    """Keras' LayerNormalization lowers with a float32 NEG that stays in a full-integer file (issue 11)."""
    import keras

    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Reshape((16, 48))(inputs)
    x = keras.layers.LayerNormalization(epsilon=1e-6)(keras.layers.Dense(32)(x))
    model = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Flatten()(x)))
    path = str(tmp_path / "keras_ln_int8.tflite")
    # TensorFlow's converter itself: export_tflite refuses such a file (a float op in a full_integer_int8 file fails
    # the export)
    import tensorflow as tf

    from export.signature import serving_function

    # written by hand: export's ServingGraph swaps Keras' LayerNormalization for keras_vit's, which has no NEG
    serve, _ = serving_function(model, batch_size=1)
    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint("serving_default", serve)
    archive.write_out(str(tmp_path / "sm"), verbose=False)
    if True:
        converter = tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm"))
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([image[None]] for image in trained_vit[2][:16])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        with open(path, "wb") as f:
            f.write(converter.convert())
    profile = tflite_profile(path, measure_latency=False)
    ops = flatbuffer_ops(path)
    rows = {row["op"]: row for row in profile["ops"]}
    assert rows["NEG"]["count"] == sum(n == "NEG" for n, _, _ in ops) >= 1
    assert rows["NEG"]["input_types"] == rows["NEG"]["output_types"] == ["float32"]
    floats = [n for n, ins, outs in ops if n not in ("QUANTIZE", "DEQUANTIZE") and "float32" in ins + outs]
    assert profile["float_ops_in_quantised_graph"] == len(floats) >= rows["NEG"]["count"]
    assert f"{len(floats)} float ops in a quantised graph" in format_profile(profile)


def test_float32_batch_one_runs_on_xnnpack_in_two_partitions(files):
    profile = tflite_profile(files["float32_b1"], measure_latency=False)
    assert profile["float_ops_in_quantised_graph"] == 0
    # all but the class token's STRIDED_SLICE (which XNNPACK declines), so the graph runs in 2 partitions
    assert [off["op"] for off in profile["off_delegate"]] == ["STRIDED_SLICE"]
    assert profile["xnnpack_ops"] == profile["num_ops"] - 1 and profile["xnnpack_partitions"] == 2


def test_a_dynamic_batch_leaves_its_shape_ops_off_the_delegate(files):
    dynamic = tflite_profile(files["float32_dynamic"], measure_latency=False)
    fixed = tflite_profile(files["float32_b1"], measure_latency=False)
    ops = flatbuffer_ops(files["float32_dynamic"])
    shape_ops = [i for i, (name, _, _) in enumerate(ops) if name in SHAPE_OPS]
    off = {o["index"]: o for o in dynamic["off_delegate"]}
    assert shape_ops and set(shape_ops) <= set(off)
    assert all(ops[i][1] + ops[i][2] == ["int32"] * len(ops[i][1] + ops[i][2]) for i in shape_ops if ops[i][0] != "SHAPE")
    assert any(o["reason"].startswith("dynamic shape") and o["op"] == "RESHAPE" for o in off.values())
    assert dynamic["num_ops"] > fixed["num_ops"] and dynamic["xnnpack_partitions"] > fixed["xnnpack_partitions"]
    assert fixed["num_ops"] == len([1 for n, _, _ in flatbuffer_ops(files["float32_b1"])])


def test_latency_and_each_ops_time_are_measured(files):
    profile = tflite_profile(files["full_integer_int8_b1"], num_threads=2, runs=3)
    assert profile["num_threads"] == 2
    assert all(isinstance(v, float) and v > 0 for v in profile["latency_ms"].values())
    assert all(isinstance(row["time_ms"], float) and row["time_ms"] >= row["off_delegate_ms"] >= 0
               for row in profile["ops"])
    assert all(isinstance(row["time_ms"], float) for row in profile["off_delegate"])
    # the rows add up: every op timed once, the off-XNNPACK part from the ops the profile lists as off
    assert sum(row["time_ms"] for row in profile["ops"]) == pytest.approx(profile["latency_ms"]["ops_sum"], abs=1e-3)
    assert sum(row["time_ms"] for row in profile["off_delegate"]) == pytest.approx(
        profile["latency_ms"]["off_delegate_sum"], abs=1e-3)
    assert {r["op"]: r["off_delegate_ms"] > 0 for r in profile["ops"] if r["op"] == "SOFTMAX"} == {"SOFTMAX": True}
    assert "timed alone" in profile["op_time"]
    table = format_profile(profile)
    for row in profile["ops"]:
        assert f"| {row['op']} | {row['count']} |" in table
    for (op, reason), count in off_delegate_summary(profile).items():
        assert f"off XNNPACK: {count} x {op}: {reason}" in table
    assert " x SOFTMAX: quantised (int8)" in table and "ops timed alone: " in table


@pytest.mark.parametrize("key", ["float32_dynamic", "full_integer_int8_b1", "int8_b1"])
def test_each_op_alone_computes_what_it_computes_in_the_whole_file(files, key):
    # the one-op models behind the op times are the file's ops: fed the inputs a whole-graph run gives them,
    # on the builtin kernels, each returns exactly that run's outputs
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from export.profile import one_op_models, tensor_values

    values = tensor_values(files[key])
    with open(files[key], "rb") as f:
        content = f.read()
    names, compared = [], 0
    for index, name, inputs, single in one_op_models(content, {t: v.shape for t, v in values.items()}):
        names.append(name)
        interpreter = Interpreter(model_content=single,
                                  experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        interpreter.allocate_tensors()
        for detail, t in zip(interpreter.get_input_details(), inputs):
            interpreter.set_tensor(detail["index"], values[t])
        interpreter.invoke()
        outputs = [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
        expected = [values[t] for t in flatbuffer_op_outputs(files[key])[index]]
        for got, want in zip(outputs, expected):
            np.testing.assert_array_equal(got, want, err_msg=f"op {index} ({name})")
            compared += 1
    assert names == [n for n, _, _ in flatbuffer_ops(files[key])] and compared >= len(names)


def flatbuffer_op_outputs(path):
    from tensorflow.lite.python import schema_py_generated as schema

    with open(path, "rb") as f:
        model = schema.ModelT.InitFromObj(schema.Model.GetRootAs(f.read(), 0))
    return [list(op.outputs) for op in model.subgraphs[0].operators]


@pytest.mark.parametrize("function", ["tflite_profile", "op_times"])
def test_bad_input_is_named(files, tmp_path, function):
    from export import profile

    call = getattr(profile, function)
    with pytest.raises(ValueError, match=r"`path` must be an existing .tflite file. Received: path='nowhere.tflite'"):
        call("nowhere.tflite")
    for name, value in (("num_threads", 0), ("runs", 1.5), ("num_threads", True), ("runs", 0)):
        with pytest.raises(ValueError, match=rf"`{name}` must be a positive int. Received: {name}={value!r}"):
            call(files["float32_b1"], **{name: value})
    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer" * 8)
    with pytest.raises(RuntimeError, match="LiteRT cannot load the file"):
        call(str(junk))


def test_benchmark_clis_name_a_file_litert_cannot_load(files, tmp_path, capsys):
    from benchmarks import op_time, quant_error

    junk = tmp_path / "junk.tflite"
    junk.write_bytes(b"not a flatbuffer" * 8)
    for main, argv in ((op_time.main, [str(junk)]), (quant_error.main, [files["float32_b1"], str(junk)]),
                       (quant_error.main, [str(junk), files["float32_b1"]])):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
    assert capsys.readouterr().err.count(f"LiteRT cannot load {junk}") == 3


def test_cli_profile_puts_each_tflite_profile_in_the_report(trained_vit, tmp_path, capsys):
    out = tmp_path / "export"
    argv = [trained_vit[1], "--formats", "tflite,onnx", "--quantization", "float32,int8", "--output-dir", str(out),
            "--calibration-data", "digits",
            "--no-latency", "--profile"]
    assert cli.main(argv) == 0
    rows = {r["name"]: r for r in json.loads((out / "report.json").read_text())["artifacts"]}
    for name in ("model_float32.tflite", "model_int8.tflite"):
        profile = rows[name]["profile"]
        assert profile["num_ops"] == len(flatbuffer_ops(str(out / name))) and profile["file"] == name
        assert set(profile["latency_ms"].values()) == {None} and len(profile["latency_ms"]) == 4  # --no-latency
    assert "profile" not in rows["model.onnx"]
    report = json.loads((out / "report.json").read_text())
    assert report["tflite_batch_size"] == 1  # the default: no shape ops, 2 partitions
    float32 = rows["model_float32.tflite"]["profile"]
    assert float32["xnnpack_partitions"] == 2 and not {r["op"] for r in float32["ops"]} & set(SHAPE_OPS)
    printed = capsys.readouterr().out
    assert "model_int8.tflite: " in printed and "| QUANTIZE |" in printed


def test_tflite_files_default_to_a_fixed_batch_of_one(trained_vit, files, tmp_path):
    from export.runtimes import _run_tflite, _tflite_interpreter

    model, _, images, _ = trained_vit
    path = str(tmp_path / "default.tflite")
    export_tflite(model, path)
    assert _tflite_interpreter(path).get_input_details()[0]["shape_signature"].tolist() == [1, 16, 16, 3]
    assert not {name for name, _, _ in flatbuffer_ops(path)} & set(SHAPE_OPS)
    # the same outputs as the dynamic-batch file of the same model
    np.testing.assert_allclose(_run_tflite(path, images[:8]), _run_tflite(files["float32_dynamic"], images[:8]), atol=1e-5)


def test_export_all_batch_size_none_gives_a_dynamic_tflite_file(trained_vit, tmp_path):
    from export.pipeline import export_all
    from export.runtimes import _tflite_interpreter

    model = trained_vit[0]
    report = export_all(model, str(tmp_path / "out"), formats="tflite", quantizations="float32", batch_size=None,
                        measure_latency=False)
    assert report["tflite_batch_size"] is None
    path = str(tmp_path / "out" / "model_float32.tflite")
    assert _tflite_interpreter(path).get_input_details()[0]["shape_signature"].tolist() == [-1, 16, 16, 3]
    assert {name for name, _, _ in flatbuffer_ops(path)} >= set(SHAPE_OPS)
    with pytest.raises(ValueError, match=r"`batch_size` must be 1 or None \(dynamic\). Received: batch_size=4"):
        export_all(model, str(tmp_path / "bad"), formats="tflite", quantizations="float32", batch_size=4)


def test_op_time_benchmark_accounts_for_every_op_on_both_thread_counts(files, tmp_path, capsys):
    # smoke test of `python -m benchmarks.op_time` on the tiny full-integer int8 file (ops on both XNNPACK and the
    # builtin kernels): structure, no timing
    from benchmarks import op_time

    (result,) = op_time.measure([files["full_integer_int8_b1"]], rounds=1, runs=1, progress=lambda text: None)
    ops = flatbuffer_ops(files["full_integer_int8_b1"])
    assert sum(r["count"] for r in result["ops"]) == len(ops)
    profile = tflite_profile(files["full_integer_int8_b1"], measure_latency=False)
    assert profile["off_delegate"]  # the builtin rows below are not empty
    assert sum(r["count"] for r in result["ops"] if r["where"] == "builtin") == len(profile["off_delegate"])
    assert [r["lost_ms"] for r in result["ops"]] == sorted((r["lost_ms"] for r in result["ops"]), reverse=True)
    assert all(r["lost_ms"] == r["ms_2"] - r["ms_1"] / 2 for r in result["ops"])
    table = op_time.markdown([result], top=3)
    assert f"| full_integer_int8_b1.tflite | {result['graph_ms'][1]:.2f} |" in table
    assert table.count("| builtin |") + table.count("| xnnpack |") == min(3, len(result["ops"]))


def test_op_time_cli_refuses_a_path_that_is_no_tflite_or_onnx_file(tmp_path, capsys):
    from benchmarks import op_time

    for argv in ([str(tmp_path)], [str(tmp_path / "x.onnx")], [str(tmp_path / "x.h5")], [str(tmp_path), "--runs", "0"]):
        with pytest.raises(SystemExit) as e:
            op_time.main(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "no .tflite or .onnx file in" in err and err.count("must be a .tflite or .onnx file or a folder") == 2
    assert "--runs must be a positive" in err
