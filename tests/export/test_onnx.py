import os

import keras
import numpy as np
import onnx
import onnxruntime
import pytest
import tensorflow as tf

from export import export_onnx
from export.onnx import check_onnx
from export.verify import reference_outputs

pytestmark = pytest.mark.export


def test_standard_ops_dynamic_batch_and_values(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = export_onnx(model, str(tmp_path / "m.onnx"))
    proto = onnx.load(path)
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    ops = {n.op_type for n in proto.graph.node}
    assert "Erf" in ops and not {"Erfc", "PartitionedCall"} & ops
    assert all(n.domain in ("", "ai.onnx") for n in proto.graph.node)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    assert [o.name for o in session.get_outputs()] == ["predictions"]
    assert session.get_inputs()[0].shape[1:] == [16, 16, 3] and not isinstance(session.get_inputs()[0].shape[0], int)
    for n in (1, 4):
        out = session.run(["predictions"], {"images": images[:n]})[0]
        np.testing.assert_allclose(out, reference_outputs(model, images[:n]), atol=1e-4)


def test_include_preprocessing(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = export_onnx(model, str(tmp_path / "m.onnx"), include_preprocessing=True)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    out = session.run(None, {"pixels": (images[:3] + 1) * 127.5})[0]  # issue 25: its own input name
    np.testing.assert_allclose(out, reference_outputs(model, images[:3]), atol=1e-4)


def test_keras_exact_gelu_trap_fails_loudly_and_leaves_nothing(tmp_path):
    """docs/traps.md: keras.activations.gelu lowers to Erfc, which tf2onnx 1.17 cannot convert."""
    inputs = keras.Input((4, 4, 3))
    x = keras.layers.Flatten()(inputs)
    outputs = keras.layers.Dense(3, activation=lambda t: keras.activations.gelu(t, approximate=False))(x)
    model = keras.Model(inputs, outputs)
    with pytest.raises(RuntimeError, match=r"m.onnx: tf2onnx left unconverted ops \['Erfc'\]"):
        export_onnx(model, str(tmp_path / "m.onnx"))
    assert not os.listdir(tmp_path)


def _one_node_model(op_type):
    graph = onnx.helper.make_graph(
        [onnx.helper.make_node(op_type, ["images"], ["predictions"])], "g",
        [onnx.helper.make_tensor_value_info("images", onnx.TensorProto.FLOAT, [1])],
        [onnx.helper.make_tensor_value_info("predictions", onnx.TensorProto.FLOAT, [1])],
    )
    return onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString()


def test_check_rejects_a_file_onnxruntime_refuses():
    with pytest.raises(RuntimeError, match=r"bad.onnx: tf2onnx left unconverted ops \['Erfc'\]"):
        check_onnx(_one_node_model("Erfc"), "bad.onnx")
    with pytest.raises(RuntimeError, match=r"bad.onnx: the ONNX graph is invalid or onnxruntime refuses it"):
        check_onnx(_one_node_model("NoSuchOp"), "bad.onnx")
    check_onnx(_one_node_model("Erf"), "good.onnx")


@pytest.mark.parametrize("opset", [12, 19, "17", True])
def test_bad_opset(trained_vit, tmp_path, opset):
    with pytest.raises(ValueError, match=r"`opset` must be an int in \[13, 18\]"):
        export_onnx(trained_vit[0], str(tmp_path / "m.onnx"), opset=opset)


def test_existing_file_is_kept(trained_vit, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(b"earlier")
    with pytest.raises(FileExistsError):
        export_onnx(trained_vit[0], str(path))
    assert path.read_bytes() == b"earlier"
