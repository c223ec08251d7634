import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from export import export_tflite
from export.metadata import read_metadata
from export.tflite import check_builtin_ops, op_names
from export.images import representative_samples
from export.runtimes import _run_tflite, _tflite_interpreter, tflite_invoke
from export.tolerances import compare
from export.verify import reference_outputs

pytestmark = pytest.mark.export

# Per-mode bounds for the tiny test model (15 epochs on digits); the product's own
# tolerances on the demo model are in export/verify.py.
BOUNDS = {"float32": 1e-4, "float16": 5e-2, "dynamic_int8": 0.5, "int8": 1.5, "full_integer_int8": 1.5}


@pytest.mark.parametrize("quantization", ["float32", "float16", "dynamic_int8", "int8", "full_integer_int8"])
def test_each_mode_runs_in_litert_with_builtin_ops(trained_vit, tmp_path, quantization):
    model, _, images, labels = trained_vit
    path = str(tmp_path / f"m_{quantization}.tflite")
    # batch_size=None: a dynamic batch, resized to 3 below (the default is a fixed batch of 1)
    export_tflite(model, path, quantization=quantization, representative_data=images, batch_size=None, progress=False)
    content = open(path, "rb").read()
    names = check_builtin_ops(content, path)
    assert "GELU" in names and not any(n.startswith("Flex") for n in names)
    ref = reference_outputs(model, images)
    out = _run_tflite(path, images)
    figures = compare(ref, out, labels)
    assert figures["max_abs_diff"] <= BOUNDS[quantization], figures
    assert figures["top1_agreement"] >= (1.0 if quantization == "float32" else 0.9), figures
    # a larger batch through the same file
    interpreter = _tflite_interpreter(path)
    interpreter.allocate_tensors()
    batch3 = tflite_invoke(interpreter, images[:3])
    np.testing.assert_allclose(batch3, out[:3], atol=1e-5)


def test_fixed_batch_one(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    path = str(tmp_path / "b1.tflite")
    export_tflite(model, path, batch_size=1)
    interpreter = _tflite_interpreter(path)
    assert interpreter.get_input_details()[0]["shape_signature"].tolist() == [1, 16, 16, 3]
    np.testing.assert_allclose(_run_tflite(path, images[:4]), reference_outputs(model, images[:4]), atol=1e-4)
    with pytest.raises(ValueError, match=r"`batch_size` must be None \(dynamic\) or 1. Received: batch_size=4"):
        export_tflite(model, str(tmp_path / "b4.tflite"), batch_size=4)


def test_sizes_shrink_with_quantization(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    sizes = {}
    for q in ("float32", "float16", "dynamic_int8", "int8", "full_integer_int8"):
        path = str(tmp_path / f"{q}.tflite")
        export_tflite(model, path, quantization=q, representative_data=images, progress=False)
        sizes[q] = os.path.getsize(path)
    # Tiny models carry a fixed ~25 KB of graph structure; the demo's 0.3x bar is checked in test_demo_export.
    assert sizes["float16"] < sizes["float32"] and sizes["dynamic_int8"] < sizes["float16"]
    assert sizes["full_integer_int8"] < sizes["float16"]
    # the phone-CPU int8 file adds QUANTIZE / DEQUANTIZE pairs and may keep matrix products float32 (its sensitivity
    # pass): on this tiny model it is not below float16 (measured 43,648 bytes against 42,800), only below float32
    assert sizes["int8"] < sizes["float32"]


@pytest.mark.parametrize("io_type,dtype", [("int8", np.int8), ("uint8", np.uint8)])
def test_full_integer_int8_integer_io(trained_vit, tmp_path, io_type, dtype):
    model, _, images, _ = trained_vit
    path = str(tmp_path / "int.tflite")
    labels = [str(d) for d in range(10)]
    export_tflite(model, path, quantization="full_integer_int8", representative_data=images, io_type=io_type,
                  metadata={"labels": labels}, progress=False)
    assert read_metadata(path)["labels"] == labels
    interpreter = _tflite_interpreter(path)
    interpreter.allocate_tensors()
    assert interpreter.get_input_details()[0]["dtype"] == dtype
    assert interpreter.get_output_details()[0]["dtype"] == dtype
    out = _run_tflite(path, images)
    assert compare(reference_outputs(model, images), out)["top1_agreement"] >= 0.9


def test_include_preprocessing_with_uint8_input_takes_raw_bytes(trained_vit, tmp_path):
    model, _, images, _ = trained_vit
    raw = (images + 1.0) * 127.5
    path = str(tmp_path / "raw.tflite")
    export_tflite(model, path, quantization="full_integer_int8", representative_data=raw, io_type="uint8",
                  include_preprocessing=True, progress=False)
    interpreter = _tflite_interpreter(path)
    interpreter.allocate_tensors()
    scale, zero = interpreter.get_input_details()[0]["quantization"]
    assert scale == pytest.approx(1.0, abs=0.02) and zero == 0  # bytes in [0, 255] go straight in
    out = _run_tflite(path, raw)
    assert compare(reference_outputs(model, images), out)["top1_agreement"] >= 0.9


def test_representative_data_forms(trained_vit, tmp_path):
    images = trained_vit[2]
    shape = (16, 16, 3)
    labels = np.zeros(len(images), "int32")
    forms = [
        images,
        tf.data.Dataset.from_tensor_slices(images),
        tf.data.Dataset.from_tensor_slices((images, labels)),
        tf.data.Dataset.from_tensor_slices((images, labels)).batch(7),
        tf.data.Dataset.from_tensor_slices(images).batch(5),
    ]
    for form in forms:
        samples = representative_samples(form, shape)
        np.testing.assert_array_equal(samples, images)
    assert representative_samples(images, shape, max_samples=10).shape == (10, 16, 16, 3)


def test_representative_data_from_image_folder(tmp_path):
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")
    samples = representative_samples(str(tmp_path / "photos"), (16, 16, 3))
    assert samples.shape == (10, 16, 16, 3) and samples.min() >= -1 and samples.max() <= 1
    raw = representative_samples(str(tmp_path / "photos"), (16, 16, 3), include_preprocessing=True)
    assert raw.max() > 100 and raw.min() >= 0


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"quantization": "16x8"}, ValueError, r"quantization='16x8' is refused: the mode is called 'int16x8'"),
        ({"quantization": "float8"}, ValueError, r"`quantization` must be one of float32, float16, dynamic_int8, int8, full_integer_int8, int16x8, weight_only_int8, weight_only_int4, dynamic_int4, int8_mixed16. Received: quantization='float8'"),
        ({"quantization": "int16x8"}, ValueError, r"quantization='int16x8' needs representative_data"),
        ({"quantization": "int8"}, ValueError, r"quantization='int8' needs representative_data"),
        ({"quantization": "int8", "representative_data": np.zeros((0, 16, 16, 3))}, ValueError, r"calibration\) data set is empty"),
        ({"quantization": "int8", "representative_data": tf.data.Dataset.from_tensor_slices(np.zeros((0, 16, 16, 3), "float32"))}, ValueError, r"data set is empty"),
        ({"quantization": "int8", "representative_data": np.zeros((2, 8, 8, 3))}, ValueError, r"calibration images must have shape \(n, 16, 16, 3\)"),
        ({"quantization": "float16", "io_type": "uint8"}, ValueError, r"io_type='uint8' needs quantization='full_integer_int8'"),
        # the phone-CPU int8 file takes float32 I/O only (issue 45)
        ({"quantization": "int8", "io_type": "int8"}, ValueError, r"io_type='int8' needs quantization='full_integer_int8'"),
        # LiteRT aborted the whole process on a NaN calibration range (int16x8), leaving a temporary file behind
        ({"quantization": "int16x8", "representative_data": np.full((2, 16, 16, 3), np.nan, "float32")}, ValueError,
         r"`representative_data` must hold finite pixel values. Received: 1536 NaN or Inf values in 2 images"),
        ({"quantization": "int8", "representative_data": np.where(np.arange(16 * 16 * 3).reshape(1, 16, 16, 3) == 7,
                                                                   np.inf, 0.0)}, ValueError, r"1 NaN or Inf values in 1 images"),
        ({"quantization": "int8", "representative_data": ["a", "b"]}, ValueError,
         r"`representative_data` must be numeric images \(n, height, width, channels\). Received: list"),
    ],
)
def test_bad_input_refused_up_front(trained_vit, tmp_path, kwargs, error, message):
    path = tmp_path / "m.tflite"
    with pytest.raises(error, match=message):
        export_tflite(trained_vit[0], str(path), progress=False, **kwargs)
    assert not os.listdir(tmp_path)


def test_existing_file_is_kept(trained_vit, tmp_path):
    path = tmp_path / "m.tflite"
    path.write_bytes(b"earlier")
    with pytest.raises(FileExistsError):
        export_tflite(trained_vit[0], str(path))
    assert path.read_bytes() == b"earlier"


def _flex_model_content():
    """A .tflite that needs a Select-TF (Flex) op: the broken-file trap of docs/traps.md."""
    fn = tf.function(lambda x: tf.linalg.inv(tf.reshape(x, (1, 2, 2))), input_signature=[tf.TensorSpec((1, 4), tf.float32)])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS, tf.lite.OpsSet.SELECT_TF_OPS]
    return converter.convert()


def test_flex_ops_fail_loudly(tmp_path):
    content = _flex_model_content()
    assert "FlexMatrixInverse" in op_names(content)
    with pytest.raises(RuntimeError, match=r"broken.tflite: non-builtin TFLite ops \['FlexMatrixInverse'\]"):
        check_builtin_ops(content, "broken.tflite")
    path = tmp_path / "broken.tflite"
    path.write_bytes(content)
    from export.verify import Artifact, VerificationError, verify

    inputs = keras.Input((4,))
    stand_in = keras.Model(inputs, inputs)
    with pytest.raises(VerificationError, match=r"broken.tflite: cannot run in its runtime"):
        verify(stand_in, [Artifact("broken.tflite", "tflite", str(path))], np.eye(2, dtype="float32").reshape(1, 4))


def test_export_of_a_graph_without_builtin_form_leaves_nothing(tmp_path):
    """Keras' exact GELU lowers to Erfc (docs/traps.md); Erfc alone has no TFLite form."""

    class Erfc(keras.layers.Layer):
        def call(self, x):
            return tf.math.erfc(x)

    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Flatten()(Erfc()(inputs)))
    with pytest.raises(RuntimeError, match=r"m.tflite: TFLite conversion with builtin ops only failed"):
        export_tflite(model, str(tmp_path / "m.tflite"))
    assert not os.listdir(tmp_path)


def test_metadata_round_trip(trained_vit, tmp_path):
    model = trained_vit[0]
    labels = [f"digit {i}" for i in range(10)]
    path = str(tmp_path / "m.tflite")
    export_tflite(model, path, metadata={"labels": labels})
    info = read_metadata(path)
    assert info["labels"] == labels and info["associated_files"] == ["labels.txt"]
    tensor = info["metadata"]["subgraph_metadata"][0]["input_tensor_metadata"][0]
    norm = [p for p in tensor["process_units"] if p["options_type"] == "NormalizationOptions"][0]["options"]
    assert norm == {"mean": [127.5], "std": [127.5]}
    assert tensor["content"]["content_properties"]["color_space"] == "RGB"
    assert tensor["content"]["content_properties"]["default_size"] == {"width": 16, "height": 16}
    assert info["metadata"]["name"] == "keras_vit Vision Transformer"
    assert "GELU" in op_names(open(path, "rb").read())  # metadata did not break the model
    np.testing.assert_allclose(_run_tflite(path, trained_vit[2][:2]), reference_outputs(model, trained_vit[2][:2]), atol=1e-4)


def test_metadata_bad_labels(trained_vit, tmp_path):
    with pytest.raises(ValueError, match=r"`metadata\['labels'\]` must name each of the model's 10 outputs.*Received: 0 labels"):
        export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), metadata={"labels": []})
    assert not os.listdir(tmp_path)
