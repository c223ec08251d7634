"""Issue 13, item 4 and `keras-vit-export --image-size`: models of any resolution, and models exported at another size.

A model of any resolution (`input_shape=(None, None, 3)`) exports SavedModel and ONNX files of dynamic height
and width, verified at two sizes; its .tflite files are fixed at `--image-size` (default: its table grid x patch
size) or, with `--image-size dynamic`, keep a dynamic size that `resize_tensor_input` changes. A fixed-size model
is resized (`keras_vit.resize`) before export. Each test also runs the written files itself, at each size, against
the Keras model.
"""

import json
import os

import keras
import numpy as np
import pytest

import keras_vit
from export import __main__ as cli
from export.onnx import export_onnx
from export.pipeline import export_all
from export.saved_model import export_saved_model
from export.scores import softmax

pytestmark = pytest.mark.export

TINY = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, classes=10, classifier_activation=None)


@pytest.fixture(scope="module")
def dynamic_vit(trained_vit):
    """The shared trained 16 px ViT's weights in a model of any resolution (table grid 4 x 4, i.e. 16 px)."""
    model = keras_vit.VisionTransformer(input_shape=(None, None, 3), position_embedding_grid=(4, 4), name="tiny_any",
                                        **TINY)
    model.set_weights(trained_vit[0].get_weights())
    return model


def _images(shape, n=4, seed=1):
    return np.random.default_rng(seed).uniform(-1, 1, (n, *shape)).astype("float32")


def _digits(size, n=48):
    """Held-out digits at `size` (height, width), in [-1, 1]."""
    from keras_vit import data

    return next(iter(data.digits("validation", image_size=size, batch_size=n)))[0].numpy()


def _keras_probabilities(model, images):
    return softmax(model.predict(images, verbose=0))


def _run_tflite(path, images, resize=False):
    """LiteRT's outputs, one image at a time; `resize`: `resize_tensor_input` to the images' size first."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    index = interpreter.get_input_details()[0]["index"]
    if resize:
        interpreter.resize_tensor_input(index, [1, *images.shape[1:]])
    interpreter.allocate_tensors()
    outputs = []
    for image in images:
        interpreter.set_tensor(index, image[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"])[0])
    return np.asarray(outputs)


def _op_names(path):
    from ai_edge_litert.interpreter import Interpreter

    return {op["op_name"] for op in Interpreter(model_path=str(path))._get_ops_details()}


def _default_size(path):
    """The input's `ImageProperties.default_size` in the file's metadata, and its description."""
    from export.metadata import read_metadata

    tensor = read_metadata(str(path))["metadata"]["subgraph_metadata"][0]["input_tensor_metadata"][0]
    return tensor["content"]["content_properties"]["default_size"], tensor["description"]


def _rows(report):
    return {row["name"]: row for row in report["artifacts"]}


def test_dynamic_saved_model_and_onnx_take_any_size_and_are_verified_at_two(dynamic_vit, trained_vit, tmp_path):
    import onnx
    import onnxruntime
    import tensorflow as tf

    x16 = _images((16, 16, 3))
    np.testing.assert_allclose(dynamic_vit.predict(x16, verbose=0), trained_vit[0].predict(x16, verbose=0), atol=1e-5)
    out = tmp_path / "export"
    report = export_all(dynamic_vit, str(out), formats="saved_model,onnx", calibration_data="digits",
                        measure_latency=False)
    # verified at the table's size (16 x 16) and one patch row and two patch columns more, on the held-out digits
    assert report["dynamic_size"] and report["verification_sizes"] == [[16, 16], [20, 24]]
    assert report["input_shape"] == [16, 16, 3]
    for row in report["artifacts"]:
        assert row["passed"] and row["verified_sizes"] == [[16, 16], [20, 24]], row
        assert row["at_sizes"]["20x24"]["relative_max_abs_diff"] <= 2e-5
        assert row["at_sizes"]["20x24"]["accuracy"] is not None  # labels travel with the resized images

    serve = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, None, None, 3]
    proto = onnx.load(str(out / "model.onnx"))
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in dims] == [True, True, True, False] and dims[3].dim_value == 3
    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for shape in ((16, 16, 3), (20, 24, 3), (24, 12, 3)):  # the two verified sizes and one neither check used
        images = _images(shape)
        expected = _keras_probabilities(dynamic_vit, images)
        assert expected.std(-1).min() > 1e-3  # not a uniform answer
        np.testing.assert_allclose(serve(images=tf.constant(images))["predictions"].numpy(), expected, atol=1e-5)
        np.testing.assert_allclose(session.run(["predictions"], {"images": images})[0], expected, atol=1e-5)


def test_dynamic_model_tflite_files_at_the_table_size_and_at_image_size(dynamic_vit, tmp_path):
    """float32 and a quantised .tflite file of a model of any resolution: 16 x 16 by default (int8), 20 x 24 with
    image_size (dynamic_int8: the 16 px model, not fine-tuned at 20 x 24, is 50% accurate there and its full-integer
    int8 file agreed on 93.6% of decisions, under that file's 97% bar, the same figure as keras_vit.resize's fixed
    model gives; docs/traps.md)."""
    for image_size, shape, quantised in ((None, (16, 16, 3), "int8"), ("20,24", (20, 24, 3), "dynamic_int8")):
        out = tmp_path / f"export_{shape[0]}"
        report = export_all(dynamic_vit, str(out), formats="tflite,onnx", quantizations=f"float32,{quantised}",
                            calibration_data="digits", measure_latency=False, image_size=image_size)
        assert report["tflite_image_size"] == list(shape[:2]) and report["input_shape"] == list(shape)
        rows = _rows(report)
        assert all(row["passed"] for row in rows.values()), rows
        # the ONNX file stays dynamic, verified at the export size and the table's size (or the rectangle beyond it)
        assert rows["model.onnx"]["verified_sizes"] == [list(shape[:2]), [20, 24] if image_size is None else [16, 16]]
        images = _digits(shape[:2])
        expected = _keras_probabilities(dynamic_vit, images)
        for name in ("model_float32.tflite", f"model_{quantised}.tflite"):
            assert rows[name]["verified_sizes"] == [list(shape[:2])]
            assert "at_sizes" not in rows[name]
            from ai_edge_litert.interpreter import Interpreter

            details = Interpreter(model_path=str(out / name)).get_input_details()[0]
            assert list(details["shape"]) == [1, *shape] and list(details["shape_signature"]) == [1, *shape]
            assert not {op for op in _op_names(out / name) if op.startswith("Flex") or op == "CUSTOM"}
            assert _default_size(out / name)[0] == {"height": shape[0], "width": shape[1]}
            # MediaPipe runs the fixed-size files, as it does any keras_vit .tflite file
            assert rows[name].get("mediapipe_top1_agreement", 1.0) >= 0.95 or "mediapipe_skipped" in rows[name]
        np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images), expected, atol=1e-5)
        quantised_outputs = _run_tflite(out / f"model_{quantised}.tflite", images)
        assert (quantised_outputs.argmax(-1) == expected.argmax(-1)).mean() >= 0.95  # the same decisions on digits
        assert np.abs(quantised_outputs - expected).mean() < 0.02
        assert "SHAPE" not in _op_names(out / "model_float32.tflite")  # the resampled table is a constant


def test_dynamic_size_tflite_file_resizes_and_is_verified_at_two_sizes(dynamic_vit, tmp_path):
    """Measured: a float32 file converted from a (1, None, None, 3) signature runs after `resize_tensor_input`."""
    out = tmp_path / "export"
    report = export_all(dynamic_vit, str(out), formats="tflite", quantizations="float32,dynamic_int8",
                        calibration_data="digits", measure_latency=False, image_size="dynamic")
    assert report["tflite_image_size"] == "dynamic"
    for row in report["artifacts"]:
        assert row["passed"] and row["verified_sizes"] == [[16, 16], [20, 24]], row
        assert "mediapipe_unsupported" in row  # MediaPipe 1.2.3 cannot invoke a file of dynamic size
    path = out / "model_float32.tflite"
    from ai_edge_litert.interpreter import Interpreter

    assert list(Interpreter(model_path=str(path)).get_input_details()[0]["shape_signature"]) == [1, -1, -1, 3]
    assert not {op for op in _op_names(path) if op.startswith("Flex") or op == "CUSTOM"}
    # the metadata's default size is the table's 16 x 16, not the unresized tensor's 1 x 1
    size, description = _default_size(path)
    assert size == {"height": 16, "width": 16} and "any height and width" in description
    for shape in ((16, 16, 3), (20, 24, 3), (32, 8, 3)):
        images = _images(shape, n=3)
        np.testing.assert_allclose(_run_tflite(path, images, resize=True), _keras_probabilities(dynamic_vit, images),
                                   atol=1e-5)


def test_dynamic_size_tflite_int8_is_refused_up_front(dynamic_vit, trained_vit, tmp_path):
    out = tmp_path / "export"
    with pytest.raises(ValueError, match="full_integer_int8.*refused: .*not integer-only.*fixed image_size"):
        export_all(dynamic_vit, str(out), formats="tflite", quantizations="float32,full_integer_int8",
                   image_size="dynamic")
    with pytest.raises(ValueError,
                       match=r"quantization='int8' with image_size='dynamic' is refused: .*fixed image_size"):
        export_all(dynamic_vit, str(out), formats="tflite", quantizations="float32,int8", image_size="dynamic")
    with pytest.raises(ValueError, match=r"dynamic needs a model of any resolution.*\(16, 16, 3\)"):
        export_all(trained_vit[0], str(out), formats="tflite", quantizations="float32", image_size="dynamic")
    assert not out.exists()


def test_cli_image_size_exports_a_fixed_model_at_another_size(trained_vit, tmp_path):
    out = tmp_path / "export"
    args = [trained_vit[1], "--image-size", "24", "--formats", "saved_model,tflite,onnx", "--quantization",
            "float32,dynamic_int8", "--calibration-data", "digits", "--output-dir", str(out), "--no-latency", "--no-mediapipe"]
    assert cli.main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["input_shape"] == [24, 24, 3] and report["resized_from"] == [16, 16]
    assert report["tflite_image_size"] == [24, 24] and not report["dynamic_size"]
    rows = _rows(report)
    assert set(rows) == {"saved_model", "model_float32.tflite", "model_dynamic_int8.tflite", "model.onnx"}
    for row in rows.values():
        assert row["passed"] and row["verified_sizes"] == [[24, 24]] and os.path.exists(row["path"]), row
    # the files compute keras_vit.resize's model: the trained table resampled once to the 6 x 6 grid
    resized = keras_vit.resize(keras.saving.load_model(trained_vit[1]), (24, 24, 3))
    images = _images((24, 24, 3), n=6)
    expected = _keras_probabilities(resized, images)
    np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images), expected, atol=1e-5)
    import onnxruntime

    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["predictions"], {"images": images})[0], expected, atol=1e-5)


@pytest.mark.parametrize("value", ["18", "16,18", "abc", "16x", "0", "-16", "16,16,16", "dynamic", "2.5e1"])
def test_bad_image_size_exits_2_naming_the_argument_and_patch_size(trained_vit, tmp_path, capsys, value):
    out = tmp_path / "export"
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], f"--image-size={value}", "--output-dir", str(out), "--no-mediapipe"])
    assert exit_info.value.code == 2
    message = capsys.readouterr().err
    assert "--image-size" in message and repr(value) in message, message
    if value != "dynamic":
        assert "patch_size 4" in message, message
    assert "Traceback" not in message and not out.exists()


@pytest.mark.parametrize("kind", ["learned_2d", "sincos_2d", "none"])
def test_each_position_embedding_kind_exports_verified(kind, tmp_path):
    """A fixed-size tiny ViT of each kind (random weights, a random head so the scores differ): float32 TFLite
    and ONNX verified by export_all, and checked here against Keras at 16 px."""
    import onnxruntime

    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(input_shape=(16, 16, 3), position_embedding=kind, name=f"tiny_{kind}", **TINY)
    head = model.get_layer("predictions")
    head.kernel.assign(np.random.default_rng(0).normal(0, 1, head.kernel.shape).astype("float32"))
    out = tmp_path / "export"
    report = export_all(model, str(out), formats="tflite,onnx", quantizations="float32", measure_latency=False,
                        mediapipe=False)
    assert all(row["passed"] for row in report["artifacts"]), report["artifacts"]
    images = _images((16, 16, 3), n=4)
    expected = _keras_probabilities(model, images)
    assert expected.std(-1).min() > 1e-3
    np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images), expected, atol=1e-5)
    session = onnxruntime.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(["predictions"], {"images": images})[0], expected, atol=1e-5)


def test_export_functions_of_a_dynamic_model_check_the_second_size(dynamic_vit, tmp_path, monkeypatch):
    """export_saved_model / export_onnx / export_tflite on a model of any resolution: dynamic SavedModel and ONNX,
    a 16 x 16 .tflite by default; a file wrong only at the second size (20 x 24) is refused and nothing lands."""
    import importlib

    import onnx
    from ai_edge_litert.interpreter import Interpreter

    from export import export_onnx, export_saved_model, export_tflite
    from export.verify import VerificationError

    export_onnx(dynamic_vit, str(tmp_path / "m.onnx"))
    dims = onnx.load(str(tmp_path / "m.onnx")).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param != "" for d in dims] == [True, True, True, False]
    export_tflite(dynamic_vit, str(tmp_path / "m.tflite"))
    assert list(Interpreter(model_path=str(tmp_path / "m.tflite")).get_input_details()[0]["shape_signature"]) == [1, 16, 16, 3]

    verify_module = importlib.import_module("export.verify")
    run = verify_module.run_artifact

    def wrong_beyond_16(artifact, images):
        outputs = run(artifact, images)
        return outputs if images.shape[1:3] == (16, 16) else outputs[:, ::-1]

    monkeypatch.setattr(verify_module, "run_artifact", wrong_beyond_16)
    with pytest.raises(VerificationError, match="at 20x24: relative_max_abs_diff"):
        export_saved_model(dynamic_vit, str(tmp_path / "saved_model"))
    assert not (tmp_path / "saved_model").exists()


def test_cli_image_size_on_a_model_of_any_resolution(dynamic_vit, tmp_path):
    """A .keras file of any resolution: --image-size fixes the .tflite files at 20 x 24; ONNX stays dynamic and is
    verified at 20 x 24 and at the table's 16 x 16. --image-size 18 names the patch size."""
    path = tmp_path / "any.keras"
    dynamic_vit.save(path)
    out = tmp_path / "export"
    args = [str(path), "--image-size", "20,24", "--formats", "tflite,onnx", "--quantization", "float32",
            "--output-dir", str(out), "--no-latency", "--no-mediapipe"]
    assert cli.main(args) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["input_shape"] == [20, 24, 3] and report["tflite_image_size"] == [20, 24] and report["dynamic_size"]
    assert "resized_from" not in report
    rows = _rows(report)
    assert rows["model.onnx"]["passed"] and rows["model.onnx"]["verified_sizes"] == [[20, 24], [16, 16]]
    assert rows["model_float32.tflite"]["passed"] and rows["model_float32.tflite"]["verified_sizes"] == [[20, 24]]
    images = _images((20, 24, 3))
    np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images),
                               _keras_probabilities(dynamic_vit, images), atol=1e-5)


def test_hybrid_of_any_resolution_exports_with_its_stride(tmp_path):
    """A hybrid (ResNet stride 8, patch 1) of any resolution: sizes are multiples of 8; the table grid 2 x 2 gives
    16 px files; SavedModel verified at 16 x 16 and 24 x 32; a size of 20 is refused naming the stride."""
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64, resnet_num_layers=(1, 1),
        input_shape=(None, None, 3), position_embedding_grid=(2, 2), classes=10, classifier_activation=None,
        name="tiny_hybrid_any")
    head = model.get_layer("predictions")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.5, head.kernel.shape).astype("float32"))
    with pytest.raises(ValueError, match=r"image_size must be positive multiples of the model's patch_size 1 x the "
                                         r"ResNet's stride = 8.*Received: image_size='20'"):
        export_all(model, str(tmp_path / "bad"), image_size="20")
    out = tmp_path / "export"
    report = export_all(model, str(out), formats="saved_model,tflite", quantizations="float32", measure_latency=False,
                        mediapipe=False)
    rows = _rows(report)
    assert rows["saved_model"]["passed"] and rows["saved_model"]["verified_sizes"] == [[16, 16], [24, 32]]
    assert rows["model_float32.tflite"]["passed"] and report["tflite_image_size"] == [16, 16]
    serve = tf.saved_model.load(str(out / "saved_model")).signatures["serving_default"]
    images = _images((32, 24, 3))
    np.testing.assert_allclose(serve(images=tf.constant(images))["predictions"].numpy(),
                               _keras_probabilities(model, images), atol=1e-5)


def test_parse_image_size_takes_numpy_ints_like_keras_vit_resize(dynamic_vit, trained_vit):
    """A fresh-user review: image_size=np.int64(32) was refused by export_all while keras_vit.resize took it."""
    from export.sizes import parse_image_size

    assert parse_image_size(np.int64(32), dynamic_vit) == (32, 32)
    assert parse_image_size((np.int32(20), 24), dynamic_vit) == (20, 24)
    assert all(type(s) is int for s in parse_image_size((np.int64(24), np.int64(16)), trained_vit[0]))
    with pytest.raises(ValueError, match="one or two ints"):
        parse_image_size(np.float32(32), dynamic_vit)


def _resizing_model(trained_vit):
    """Any size in, resized to the trained 16 px ViT's size: the keras.applications habit of a Resizing layer first."""
    inputs = keras.Input((None, None, 3))
    return keras.Model(inputs, trained_vit[0](keras.layers.Resizing(16, 16)(inputs)), name="resize_then_vit")


def _patches_model():
    """keras_vit's Patches built for any size, then a small classifier of its own (no PatchEncoder, no table)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, None, 3))
    x = keras.layers.Dense(16, activation="relu")(keras_vit.layers.Patches(4)(inputs))
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(inputs, keras.layers.Dense(5)(x), name="patches_then_dense")


@pytest.mark.parametrize("kind", ["resizing", "patches"])
def test_any_size_models_without_a_table_export_everywhere_at_the_given_size(kind, trained_vit, tmp_path):
    """Issue 29, item 7: these were refused ("has no PatchEncoder with a table grid") by every exporter but
    export_tflite(image_size=...), and keras-vit-export --image-size 96,128 exited 2."""
    model = _resizing_model(trained_vit) if kind == "resizing" else _patches_model()
    default = [16, 16] if kind == "resizing" else [224, 224]  # the ViT's own size; else the paper's resolution
    for function, path in ((export_saved_model, "saved_model"), (export_onnx, "model.onnx")):
        function(model, str(tmp_path / path))  # verified at the default size and another
        assert (tmp_path / path).exists()
    out = tmp_path / "all"
    report = export_all(model, str(out), image_size=(24, 32), quantizations=["float32"], mediapipe=False,
                        measure_latency=False)
    assert report["verification_sizes"][0] == [24, 32] and report["tflite_image_size"] == [24, 32]
    assert report["verification_sizes"][1] == default
    assert all(row["passed"] and row["verified_sizes"][0] == [24, 32] for row in report["artifacts"])
    images = _images((24, 32, 3))
    np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images),
                               softmax(model.predict(images, verbose=0)), atol=1e-5)
    model.save(tmp_path / "any.keras")
    args = [str(tmp_path / "any.keras"), "--image-size", "96,128", "--quantization", "float32", "--output-dir",
            str(tmp_path / "cli"), "--no-latency", "--no-mediapipe"]
    assert cli.main(args) == 0
    report = json.loads((tmp_path / "cli" / "report.json").read_text())
    assert report["tflite_image_size"] == [96, 128] and all(row["passed"] for row in report["artifacts"])


def test_an_image_size_of_too_many_patches_is_refused_up_front(dynamic_vit):
    """A fresh user's --image-size 2000 on a patch-4 model converted first, then ran out of memory in verification
    (one attention map of 250,000 tokens) with a traceback."""
    from export.sizes import MAX_TOKENS, parse_image_size

    with pytest.raises(ValueError, match=r"--image-size 2000,2000 cuts each image into 250,000 patches \(patch_size 4\)"
                                         r": one attention map alone would take 233 GiB"):
        parse_image_size("2000", dynamic_vit, argument="--image-size")
    side = int(MAX_TOKENS ** 0.5) * 4
    assert parse_image_size(side, dynamic_vit) == (side, side)
