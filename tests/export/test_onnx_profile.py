"""export.onnx_profile: per-node time of an .onnx file from onnxruntime's profiler, and benchmarks.op_time on it."""

import math

import numpy as np
import onnx
import onnxruntime
import pytest

from export import export_onnx
from export.onnx_profile import onnx_graph_latency_ms, onnx_op_times


@pytest.fixture(scope="module")
def onnx_files(trained_vit, tmp_path_factory):
    """The tiny trained ViT as float32 and static int8 (QDQ) ONNX files."""
    model, _, images, _ = trained_vit
    folder = tmp_path_factory.mktemp("onnx_profile")
    paths = {}
    for quantization in ("float32", "int8"):
        paths[quantization] = str(folder / f"{quantization}.onnx")
        export_onnx(model, paths[quantization], quantization=quantization, representative_data=images[:32],
                    verify=False)
    return paths


def optimised_nodes(path, tmp_path):
    """The node op types of the graph onnxruntime runs (its optimised graph, written by onnxruntime itself)."""
    options = onnxruntime.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return [node.op_type for node in onnx.load(options.optimized_model_filepath).graph.node]


@pytest.mark.parametrize("quantization", ["float32", "int8"])
@pytest.mark.parametrize("threads", [1, 2])
def test_one_entry_per_node_onnxruntime_runs(onnx_files, quantization, threads, tmp_path):
    ops = onnx_op_times(onnx_files[quantization], num_threads=threads, runs=2)
    assert sorted(o["op"] for o in ops) == sorted(optimised_nodes(onnx_files[quantization], tmp_path))
    assert len({o["index"] for o in ops}) == len(ops)
    assert all(math.isfinite(o["ms"]) and o["ms"] >= 0 and isinstance(o["parallel"], bool) for o in ops)
    if threads == 1:  # one thread has no worker to hand work to
        assert not any(o["parallel"] for o in ops)
    if quantization == "int8":
        assert {"QuantizeLinear", "DequantizeLinear"} <= {o["op"] for o in ops}


def test_graph_latency_is_positive_and_feeds_batch_one(onnx_files):
    assert onnxruntime.InferenceSession(onnx_files["float32"]).get_inputs()[0].shape[0] != 1  # a dynamic batch
    for threads in (1, 2):
        ms = onnx_graph_latency_ms(onnx_files["float32"], num_threads=threads, runs=3)
        assert 0 < ms < 10_000


@pytest.mark.parametrize("function", [onnx_op_times, onnx_graph_latency_ms])
def test_bad_input_is_named(onnx_files, tmp_path, function):
    with pytest.raises(ValueError, match=r"`path` must be an existing .onnx file. Received: path='nowhere.onnx'"):
        function("nowhere.onnx")
    for name, value in (("num_threads", 0), ("runs", 1.5), ("num_threads", True)):
        with pytest.raises(ValueError, match=rf"`{name}` must be a positive int. Received: {name}={value!r}"):
            function(onnx_files["float32"], **{name: value})
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf" * 8)
    with pytest.raises(RuntimeError, match="onnxruntime cannot load the file"):
        function(str(junk))


def test_op_time_benchmark_on_onnx_files_accounts_for_every_node(onnx_files, tmp_path):
    # smoke test of `python -m benchmarks.op_time` on the tiny ONNX files: structure, no timing
    from benchmarks import op_time

    results = op_time.measure([onnx_files["int8"], onnx_files["float32"]], rounds=1, runs=1, progress=lambda t: None)
    for result, key in zip(results, ("int8", "float32")):
        assert sum(r["count"] for r in result["ops"]) == len(optimised_nodes(onnx_files[key], tmp_path))
        assert {r["where"] for r in result["ops"]} <= {"ort, split", "ort, not split"}
        assert np.all(np.diff([r["lost_ms"] for r in result["ops"]]) <= 0)
    table = op_time.markdown(results, top=2)
    assert "| int8.onnx |" in table and "| float32.onnx |" in table
    assert table.count("| ort, split |") + table.count("| ort, not split |") == 4


def test_op_time_cli_names_an_onnx_file_onnxruntime_cannot_load(tmp_path, capsys):
    from benchmarks import op_time

    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf" * 8)
    with pytest.raises(SystemExit) as e:
        op_time.main([str(junk)])
    assert e.value.code == 2
    assert f"{junk}: onnxruntime cannot load the file" in capsys.readouterr().err


def dynamic_size_onnx(path):
    """An ONNX graph of dynamic batch, height and width (as a keras_vit model of any resolution exports):
    images (N, H, W, 3) -> ReduceMean over H and W -> (N, 3)."""
    from onnx import TensorProto, helper

    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", "H", "W", 3])
    out = helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["N", 3])
    axes = helper.make_tensor("axes", TensorProto.INT64, [2], [1, 2])
    node = helper.make_node("ReduceMean", ["images", "axes"], ["mean"], keepdims=0)
    graph = helper.make_graph([node], "dynamic_size", [images], [out], initializer=[axes])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_a_file_of_dynamic_height_and_width_needs_input_shape(tmp_path, capsys):
    from benchmarks import op_time

    path = dynamic_size_onnx(str(tmp_path / "dynamic.onnx"))
    with pytest.raises(ValueError, match=r"`input_shape` must be given .* Received: input_shape=None"):
        onnx_op_times(path)
    for bad in ((16, 16), (16, 16, 4), (16, 0, 3), "16,16,3"):
        with pytest.raises(ValueError, match="`input_shape` must "):
            onnx_graph_latency_ms(path, input_shape=bad)
    (node,) = onnx_op_times(path, runs=2, input_shape=(16, 12, 3))
    assert node["op"] == "ReduceMean" and node["ms"] >= 0
    assert onnx_graph_latency_ms(path, runs=2, input_shape=(16, 12, 3)) > 0
    # the CLI: refused up front without --input-shape, measured with it
    for argv in ([path], [path, "--input-shape", "16,x,3"]):
        with pytest.raises(SystemExit) as e:
            op_time.main(argv)
        assert e.value.code == 2
    err = capsys.readouterr().err
    assert "`input_shape` must be given" in err and "--input-shape must be comma-separated ints" in err
    assert op_time.main([path, "--input-shape", "16,12,3", "--rounds", "1", "--runs", "1"]) == 0
    assert "| dynamic.onnx |" in capsys.readouterr().out


def small_onnx(path, inputs, nodes, outputs, initializers=()):
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def test_odd_files_are_fed_or_refused_by_name(tmp_path, capsys):
    from onnx import TensorProto, helper

    from benchmarks import op_time

    value = lambda name, kind, shape: helper.make_tensor_value_info(name, kind, shape)  # noqa: E731
    # a fixed batch of 2 is fed as it is
    fixed = small_onnx(str(tmp_path / "fixed.onnx"), [value("x", TensorProto.FLOAT, [2, 4])],
                       [helper.make_node("Relu", ["x"], ["y"])], [value("y", TensorProto.FLOAT, [2, 4])])
    assert [o["op"] for o in onnx_op_times(fixed, runs=1)] == ["Relu"]
    # a string input cannot be fed
    text = small_onnx(str(tmp_path / "text.onnx"), [value("s", TensorProto.STRING, [1])],
                      [helper.make_node("Identity", ["s"], ["t"])], [value("t", TensorProto.STRING, [1])])
    with pytest.raises(ValueError, match=r"the input 's' is of type tensor\(string\)"):
        onnx_graph_latency_ms(text)
    # a shape the graph cannot take fails as a RuntimeError naming the file and the shape fed
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [1, 12])
    reshape = small_onnx(str(tmp_path / "reshape.onnx"), [value("x", TensorProto.FLOAT, ["N", "H", "W", 3])],
                         [helper.make_node("Reshape", ["x", "shape"], ["y"])], [value("y", TensorProto.FLOAT, [1, 12])],
                         [shape])
    with pytest.raises(RuntimeError, match=r"reshape.onnx: onnxruntime cannot run the file on inputs of shape"):
        onnx_op_times(reshape, input_shape=(5, 5, 3))
    with pytest.raises(ValueError, match="would take over 1 GiB"):
        onnx_op_times(reshape, input_shape=(100000, 100000, 3))
    with pytest.raises(ValueError, match="`num_threads` must be at most 1024"):
        onnx_op_times(fixed, num_threads=10**12)
    # a graph without nodes
    empty = small_onnx(str(tmp_path / "empty.onnx"), [value("x", TensorProto.FLOAT, [1, 4])], [],
                       [value("x", TensorProto.FLOAT, [1, 4])])
    with pytest.raises(RuntimeError, match="no node events"):
        onnx_op_times(empty, runs=1)
    # the CLI: each refused with exit 2 and one line
    for argv in ([text], [reshape, "--input-shape", "5,5,3"], [empty, "--runs", "1", "--rounds", "1"]):
        with pytest.raises(SystemExit) as e:
            op_time.main(argv)
        assert e.value.code == 2, argv
    err = capsys.readouterr().err
    assert "tensor(string)" in err and "cannot run the file" in err and "no node events" in err
    assert "Traceback" not in err
    folder = tmp_path / "only_fixed"
    (folder / "sub.onnx").mkdir(parents=True)  # a folder named like a file is not taken for one
    (folder / "fixed.onnx").write_bytes(open(fixed, "rb").read())
    assert op_time.main([str(folder), "--rounds", "1", "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "| fixed.onnx |" in out and "sub.onnx" not in out
