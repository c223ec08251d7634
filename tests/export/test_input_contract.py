"""Issue 25: what an app receives. The input range a model takes, its class names, one-logit heads, constant outputs,
and each file's contract (input name, dtype, range, batch; output; the app's preprocessing)."""

import json
import os

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from export import export_all, export_tflite
from export.input_range import PIXELS, UNIT, model_input_range, parse_input_range, scale
from export.metadata import read_metadata
from export.output_folder import artifact_file
from export.signature import ServingGraph
from export.scores import score_kind
from export.verify import VerificationError
from export.tolerances import compare, failures
from keras_vit import data, training

pytestmark = pytest.mark.export
TINY = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3))
NAMES = [str(d) for d in range(10)]


@keras.saving.register_keras_serializable(package="tests")
class PixelScale(keras.layers.Layer):
    """A user's own scaling layer (x / 127.5 - 1) that the exporter cannot read: the accuracy check must catch it."""

    def call(self, x):
        return x / 127.5 - 1.0


def _trained_copy(trained_vit, class_names=None):
    """A ViT of the shared tiny model's configuration holding its trained weights, with a head of class names."""
    vit = keras_vit.VisionTransformer(**TINY, classes=10, classifier_activation=None, class_names=class_names)
    vit.set_weights(trained_vit[0].get_weights())
    return vit


def _pixel_digits(split, batch_size=64, **kwargs):
    """The digits as raw pixels in [0, 255], as a user's raw-pixel pipeline gives them."""
    return data.digits(split, image_size=16, batch_size=batch_size, **kwargs).map(lambda x, y: ((x + 1.0) * 127.5, y))


def _write_folder(root, images, labels):
    """uint8 PNG files, one sub-folder per class name: a user's image folder."""
    for i, (image, label) in enumerate(zip(images, labels)):
        folder = os.path.join(root, NAMES[int(label)])
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(np.asarray(image, "uint8")).save(os.path.join(folder, f"{i:04d}.png"))
    return str(root)


def test_input_range_is_read_from_the_first_layers():
    vit = keras_vit.VisionTransformer(**TINY, classes=4)
    assert model_input_range(vit) == (UNIT, "no pixel-scaling layer before the ViT (keras_vit's own range)")
    assert model_input_range(keras_vit.VisionTransformer(**TINY, classes=4, include_preprocessing=True))[0] == PIXELS
    inputs = keras.Input((16, 16, 3))
    habit = keras.Model(inputs, vit(keras_vit.preprocess_input(inputs)))  # keras.applications' habit: ops, not layers
    assert model_input_range(habit) == (PIXELS, "read from its first layers (true_divide (x / 127.5), subtract (x - 1): "
                                                "x -> 0.00784314 x + -1)")
    seq = lambda *layers: keras.Sequential([keras.Input((16, 16, 3)), *layers, vit])  # noqa: E731
    assert model_input_range(seq(keras.layers.Rescaling(1 / 255)))[0] == PIXELS
    assert model_input_range(seq(keras.layers.Rescaling(2.0, offset=-1.0)))[0] == (0.0, 1.0)
    assert model_input_range(seq(keras.layers.RandomFlip(), keras.layers.Rescaling(1 / 127.5, offset=-1)))[0] == PIXELS
    imagenet = keras.layers.Normalization(mean=[123.7, 116.3, 103.5], variance=[58.4 ** 2, 57.1 ** 2, 57.4 ** 2])
    assert model_input_range(seq(imagenet))[0] == PIXELS
    unit = keras.layers.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.229 ** 2, 0.224 ** 2, 0.225 ** 2])
    assert model_input_range(seq(unit))[0] == (0.0, 1.0)
    unread = model_input_range(seq(PixelScale()))  # unreadable: the default, said so, caught by the accuracy check
    assert unread[0] == UNIT and unread[1].startswith("not known: its layer 'pixel_scale' (PixelScale) cannot be read")
    assert parse_input_range("0,255") == PIXELS and parse_input_range("[-1, 1]") == UNIT
    with pytest.raises(ValueError, match=r"input_range must be one of -1,1, 0,1, 0,255 .*Received: input_range='0-255'"):
        parse_input_range("0-255")
    x = np.array([-1.0, 0.0, 1.0], "float32")
    np.testing.assert_array_equal(scale(x, UNIT, PIXELS), (x + 1) * np.float32(127.5))
    np.testing.assert_array_equal(scale(scale(x, UNIT, PIXELS), PIXELS, UNIT), x)


def test_builder_include_preprocessing_and_class_names(tmp_path):
    model = keras_vit.VisionTransformer(**TINY, classes=3, include_preprocessing=True, class_names=["a", "b", "c"])
    assert [layer.name for layer in model.layers][:3] == ["images", "rescaling", "patches"]
    assert model.count_params() == keras_vit.VisionTransformer(**TINY, classes=3).count_params()
    pixels = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("float32")
    plain = keras_vit.VisionTransformer(**TINY, classes=3)
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(model.predict(pixels, verbose=0), plain.predict(pixels / 127.5 - 1, verbose=0), atol=1e-6)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert keras_vit.layers.model_class_names(loaded) == ["a", "b", "c"]
    assert keras_vit.layers.model_class_names(keras_vit.resize(loaded, (None, None, 3))) == ["a", "b", "c"]
    assert isinstance(loaded.get_layer("predictions"), keras.layers.Dense)
    with pytest.raises(ValueError, match=r"`class_names` must name each of the head's 3 classes. Received: 2 names"):
        keras_vit.VisionTransformer(**TINY, classes=3, class_names=["a", "b"])
    with pytest.raises(ValueError, match=r"`class_names` must be distinct. Received: 'a' more than once"):
        keras_vit.VisionTransformer(**TINY, classes=2, class_names=["a", "a"])
    with pytest.raises(ValueError, match=r"needs include_top=True"):
        keras_vit.VisionTransformer(**TINY, include_top=False, class_names=["a"])
    with pytest.raises(ValueError, match=r"`include_preprocessing` must be True or False"):
        keras_vit.VisionTransformer(**TINY, include_preprocessing="yes")


@pytest.mark.slow
def test_raw_pixel_habit_model_end_to_end(trained_vit, tmp_path):
    """The keras.applications habit: preprocess_input inside the model, trained on raw pixels, exported with a folder
    of the user's PNG images, right in LiteRT fed raw pixels and in MediaPipe fed the PNG files."""
    from ai_edge_litert.interpreter import Interpreter

    from export.mediapipe_check import classify

    keras.utils.set_random_seed(1)
    vit = _trained_copy(trained_vit, class_names=NAMES)
    inputs = keras.Input((16, 16, 3))
    model = keras.Model(inputs, vit(keras_vit.preprocess_input(inputs)), name="habit")
    train = _pixel_digits("train", seed=1)
    training.compile_model(model, total_steps=2 * int(train.cardinality()), learning_rate=5e-4)
    model.fit(train, epochs=2, verbose=0)  # training on raw pixels
    pixels, labels = (np.concatenate(a) for a in zip(*[(x.numpy(), y.numpy()) for x, y in _pixel_digits("validation")]))
    pixels = np.rint(pixels)
    keras_top = model.predict(pixels, verbose=0).argmax(-1)
    assert (keras_top == labels).mean() > 0.85
    model.save(tmp_path / "habit.keras")
    folder = _write_folder(tmp_path / "photos", pixels, labels)

    report = export_all(keras.saving.load_model(tmp_path / "habit.keras"), str(tmp_path / "out"),
                        formats="tflite", quantizations="float32,int8", calibration_data=folder, measure_latency=False)
    assert report["model_input_range"] == [0.0, 255.0] and report["input_range"] == [0.0, 255.0]
    assert report["labels"] == NAMES and report["labels_source"] == "model"
    assert all(r["passed"] for r in report["artifacts"])
    keras_accuracy = report["artifacts"][0]["keras_accuracy"]
    assert keras_accuracy > 0.85  # fed [0, 255]: chance would be 0.1
    for name in ("model_float32.tflite", "model_int8.tflite"):
        path = str(tmp_path / "out" / name)
        assert read_metadata(path)["labels"] == NAMES
        interpreter = Interpreter(model_path=path)
        interpreter.allocate_tensors()
        detail = interpreter.get_input_details()[0]
        tops = []
        for image in pixels:  # raw pixels, as the contract says
            interpreter.set_tensor(detail["index"], image[None].astype("float32"))
            interpreter.invoke()
            tops.append(interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).argmax())
        assert (np.array(tops) == keras_top).mean() >= 0.97, name
        contract = next(r for r in report["artifacts"] if r["name"] == name)["contract"]
        assert contract["input"]["range"] == [0.0, 255.0] and contract["input"]["batch"] == "fixed at 1"
        assert contract["app_preprocessing"].startswith("feed the RGB pixels as float32 as they are")
        description = read_metadata(path)["metadata"]["subgraph_metadata"][0]["input_tensor_metadata"][0]
        assert "as they are" in description["description"]
        files = sorted(os.path.join(d, f) for d, _, fs in os.walk(folder) for f in fs)[:60]
        truth = [NAMES.index(os.path.basename(os.path.dirname(f))) for f in files]
        frames = [np.asarray(Image.open(f).convert("RGB")) for f in files]
        assert (classify(path, frames, 10).argmax(-1) == np.array(truth)).mean() > 0.85, name


def test_unreadable_range_is_caught_by_the_models_own_accuracy(trained_vit, tmp_path):
    inputs = keras.Input((16, 16, 3))
    model = keras.Model(inputs, _trained_copy(trained_vit)(PixelScale()(inputs)))
    with pytest.raises(VerificationError, match=r"only \d+\.\d% accurate .* fed images in \[-1, 1\].*and \d+\.\d% fed "
                                                r"\[0, 255\] \(raw pixels\): it takes that range. Export with "
                                                r"--input-range 0,255"):
        export_all(model, str(tmp_path / "refused"), formats="tflite", quantizations="float32", calibration_data="digits",
                   measure_latency=False, mediapipe=False)
    assert not os.path.exists(tmp_path / "refused")  # a refused export leaves no empty folder
    report = export_all(model, str(tmp_path / "out"), formats="tflite", quantizations="float32", calibration_data="digits",
                        measure_latency=False, mediapipe=False, input_range="0,255")
    assert report["artifacts"][0]["keras_accuracy"] > 0.85 and report["model_input_range_source"].startswith("given")


def test_untrained_model_warns_loudly(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(**TINY, classes=10, classifier_activation=None)
    head = model.get_layer("predictions")
    head.set_weights([np.random.default_rng(1).normal(0, 0.5, w.shape).astype("float32") for w in head.get_weights()])
    report = export_all(model, str(tmp_path / "out"), formats="saved_model", calibration_data="digits",
                        measure_latency=False)
    assert len(report["warnings"]) == 1 and "WARNING: the Keras model itself is only" in capsys.readouterr().out
    assert "no other input range does better" in report["warnings"][0]


@pytest.mark.parametrize("n,chance", [(4, 1 / 3), (2, 0.1), (3, 0.1), (29, 0.1), (512, 0.1), (360, 0.5)])
def test_beyond_guessing_is_the_binomial_tail_at_three_sigmas(n, chance):
    from scipy.stats import binom

    from export.contract import _beyond_guessing

    for correct in range(n + 1):
        assert _beyond_guessing(correct, n, chance) == (binom.sf(correct - 1, n, chance) <= 0.00135), correct


def test_too_few_verification_images_say_so_not_that_an_accurate_model_is_near_chance(trained_vit, tmp_path, capsys):
    """A fresh user's finding: 4 verification images gave "the Keras model itself is only 100.0% accurate" (the
    bar, chance + 3 standard deviations, was over 100%). Two images (a folder of two classes of three) cannot tell
    any model from a guess: said so."""
    images, labels = next(iter(_pixel_digits("validation", batch_size=60)))
    keep = np.concatenate([np.flatnonzero(labels.numpy() == digit)[:3] for digit in (0, 1)])
    folder = _write_folder(tmp_path / "two_classes", images.numpy()[keep], labels.numpy()[keep])
    report = export_all(_trained_copy(trained_vit, class_names=NAMES), str(tmp_path / "out"), formats="saved_model",
                        calibration_data=folder, measure_latency=False)
    assert report["num_verification_images"] == 2
    warning, absent = report["warnings"]
    assert absent == ("the 2 verification images hold no image of classes '2', '3', '4', '5', '6', '7', '8', '9' (8 of "
                      "the model's 10): the files' decisions on them are not verified")
    assert warning.startswith("WARNING: 2 labelled verification images cannot tell the Keras model from a guess (it "
                              "is ") and "verify on more images" in warning and "only" not in warning
    assert warning in capsys.readouterr().out


def test_class_names_travel_from_the_model(trained_vit, tmp_path, capsys):
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    report = export_all(_trained_copy(trained_vit, class_names=names), str(tmp_path / "named"), formats="tflite",
                        quantizations="float32", measure_latency=False, mediapipe=False)
    assert report["labels_source"] == "model"
    assert read_metadata(str(tmp_path / "named" / "model_float32.tflite"))["labels"] == names
    assert (tmp_path / "named" / "labels.txt").read_text().split() == names
    capsys.readouterr()
    report = export_all(trained_vit[0], str(tmp_path / "numbers"), formats="saved_model", measure_latency=False)
    assert report["labels_source"] == "numbers"
    assert "the model holds no class names: labels.txt and the .tflite files name its 10 classes 0..9" in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"the classes \(0, 1, 2, 3, 4, \.\.\.\) of calibration_data='digits' "
                                         r"\(--calibration-data\) are not the model's own \(zero, one, two, three, four, \.\.\.\)"):
        export_all(_trained_copy(trained_vit, class_names=names), str(tmp_path / "mismatch"), formats="saved_model",
                   calibration_data="digits", measure_latency=False)


def test_a_labels_file_in_another_order_than_the_models_or_the_datas_is_refused(trained_vit, tmp_path, capsys):
    """Issue 43, item 6: a --labels file with two lines swapped was shipped: verification compares indices, so it
    passed, and every file named the wrong class for two outputs. Other names than the model's are taken with a
    warning that the report keeps."""
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    swapped = [names[1], names[0], *names[2:]]
    (tmp_path / "labels.txt").write_text("\n".join(swapped) + "\n")
    with pytest.raises(ValueError, match=r"labels \(--labels\) name the model's own class names in another order: line 1 "
                                         r"names 'one' where the model's own class names have 'zero'; line 2 names 'zero'"):
        export_all(_trained_copy(trained_vit, class_names=names), str(tmp_path / "swapped"), formats="tflite",
                   quantizations="float32", labels=str(tmp_path / "labels.txt"), measure_latency=False, mediapipe=False)
    assert not os.path.exists(tmp_path / "swapped")
    digits = [str(d) for d in range(10)]
    with pytest.raises(ValueError, match=r"name the calibration data's classes in another order: line 1 names '1'"):
        export_all(trained_vit[0], str(tmp_path / "data"), formats="saved_model", calibration_data="digits",
                   labels=[digits[1], digits[0], *digits[2:]], measure_latency=False)
    french = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"]
    capsys.readouterr()
    report = export_all(_trained_copy(trained_vit, class_names=names), str(tmp_path / "french"), formats="tflite",
                        quantizations="float32", labels=french, measure_latency=False, mediapipe=False)
    assert report["labels"] == french
    assert report["labels_source"].startswith("given, not the model's own names (9 differ: 'zéro' for 'zero'")
    assert "warning: labels (--labels) are given, not the model's own names" in capsys.readouterr().out
    assert read_metadata(str(tmp_path / "french" / "model_float32.tflite"))["labels"] == french


def test_a_calibration_folder_without_a_class_keeps_the_models_numbering(trained_vit, tmp_path):
    """Helper's finding on issue 43: a calibration folder that lacks class "3", with --labels (or the model's own
    names) naming all 10, numbered its 9 folders 0..8 in folder order, so every digit above 3 was verified against
    the class below it. The folder's classes now take the model's numbering: the float32 file's accuracy is the
    trained model's, and labels 0..8 shifted would give about one digit in ten."""
    images, labels = next(iter(_pixel_digits("validation", batch_size=360)))
    keep = labels.numpy() != 3
    folder = _write_folder(tmp_path / "no_three", images.numpy()[keep], labels.numpy()[keep])
    assert sorted(os.listdir(folder)) == [d for d in NAMES if d != "3"]
    french = ["zéro", "un", "deux", "trois", "quatre", "cinq", "six", "sept", "huit", "neuf"]
    named = _trained_copy(trained_vit, class_names=NAMES)
    # a second review: --labels that rename the model's classes numbered the folder by the labels' names
    for i, (model, given) in enumerate(((trained_vit[0], NAMES), (named, None), (named, french))):
        report = export_all(model, str(tmp_path / f"export_{i}"), formats="tflite", quantizations="float32",
                            calibration_data=folder, labels=given, measure_latency=False, mediapipe=False)
        row = report["artifacts"][0]
        assert report["labels"] == (given or NAMES) and row["passed"] and row["keras_accuracy"] >= 0.8, row
        assert report["warnings"] == [f"the {report['num_verification_images']} verification images hold no image of "
                                      f"class {(given or NAMES)[3]!r} (1 of the model's 10): the files' decisions on it "
                                      "are not verified"]
        assert row["accuracy"] == row["keras_accuracy"]
        per_class = row["per_class_agreement"]  # by the names the files carry, over Keras' decisions
        assert set(per_class) <= set(given or NAMES) and len(per_class) >= 8
        assert sum(n for n, _ in per_class.values()) == report["num_verification_images"]
    # a folder with a class the model does not have is refused, even with --labels naming the model's classes
    os.rename(os.path.join(folder, "9"), os.path.join(folder, "nine"))
    with pytest.raises(ValueError, match=r"the classes 'nine' of calibration_data='[^']*no_three' \(--calibration-data\) are not "
                                         r"among the model's own"):
        export_all(named, str(tmp_path / "foreign"), formats="saved_model", calibration_data=folder, labels=NAMES,
                   measure_latency=False)
    # without --labels it is refused too, and the message does not send the user to --labels (which is refused above)
    with pytest.raises(ValueError, match=r"but calibration_data='[^']*no_three' \(--calibration-data\) has 9 \(0, 1, 2, 4, 5, \.\.\.\); "
                                         r"'nine' is not among "
                                         r"the model's own classes \(0, 1, 2, 3, 4, \.\.\.\); export with a folder of the "
                                         r"model's classes") as refused:
        export_all(named, str(tmp_path / "foreign_no_labels"), formats="saved_model", calibration_data=folder,
                   measure_latency=False)
    assert "labels" not in str(refused.value)
    # as many classes as the model, one of another name: refused, and --labels is said not to help
    _write_folder(tmp_path / "three", images.numpy()[~keep][:20], labels.numpy()[~keep][:20])
    os.rename(tmp_path / "three" / "3", os.path.join(folder, "three"))
    with pytest.raises(ValueError, match=r"are not the model's own \(0, 1, 2, 3, 4, \.\.\.\), in that order: its labels "
                                         r"would not mean the model's classes, and labels \(--labels\) would not change "
                                         r"that. Export with a folder of the model's classes"):
        export_all(named, str(tmp_path / "foreign_ten"), formats="saved_model", calibration_data=folder,
                   measure_latency=False)


def test_export_tflite_refuses_a_label_count_other_than_the_outputs(trained_vit, tmp_path):
    with pytest.raises(ValueError, match=r"`metadata\['labels'\]` must name each of the model's 10 outputs; MediaPipe "
                                         r"refuses a file whose label count differs. Received: 4 labels"):
        export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), metadata={"labels": ["a", "b", "c", "d"]})
    assert not os.listdir(tmp_path)
    with pytest.raises(ValueError, match=r"the model's head carries no class names"):
        export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), metadata={})
    export_tflite(_trained_copy(trained_vit, class_names=NAMES), str(tmp_path / "m.tflite"), metadata={})
    assert read_metadata(str(tmp_path / "m.tflite"))["labels"] == NAMES


def test_one_logit_head_gets_a_sigmoid_and_constant_outputs_fail(tmp_path):
    from export.runtimes import _run_tflite

    keras.utils.set_random_seed(0)
    binary = keras_vit.VisionTransformer(**TINY, classes=1, classifier_activation=None)
    head = binary.get_layer("predictions")
    head.set_weights([np.random.default_rng(2).normal(0, 1.0, w.shape).astype("float32") for w in head.get_weights()])
    assert score_kind(binary) == ("probabilities", "sigmoid")
    x = np.random.default_rng(0).uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    path = export_tflite(binary, str(tmp_path / "binary.tflite"), metadata={"labels": ["cat"]})
    logits = binary.predict(x, verbose=0).astype("float64")
    np.testing.assert_allclose(_run_tflite(path, x), 1 / (1 + np.exp(-logits)), atol=1e-5)
    assert np.ptp(_run_tflite(path, x)) > 0.05  # not 1.0 for every image, as a softmax over one logit was
    with pytest.raises(ValueError, match=r"applies softmax to a single output, which is 1.0 for every image"):
        ServingGraph(keras_vit.VisionTransformer(**TINY, classes=1))
    reference = np.random.default_rng(3).normal(size=(5, 3))
    figures = compare(reference, np.ones((5, 3)) / 3)
    assert figures["constant_outputs"] and not figures["keras_constant_outputs"]
    assert any(f.startswith("outputs are the same for every image (where the Keras model's differ)")
               for f in failures(figures, "float32"))
    untrained = compare(np.full((5, 3), 1 / 3), np.full((5, 3), 1 / 3))
    assert "an untrained model" in failures(untrained, "float32")[0]


def test_include_preprocessing_files_have_their_own_names_and_input(trained_vit, tmp_path):
    from ai_edge_litert.interpreter import Interpreter
    import onnxruntime

    assert artifact_file("tflite", "int8", pixels=True) == "model_int8_pixels.tflite"
    assert artifact_file("tflite", "full_integer_int8", pixels=True) == "model_full_integer_int8_pixels.tflite"
    assert artifact_file("onnx", "float32", pixels=True) == "model_pixels.onnx"
    # uint8 I/O: the full-integer (NPU) file's, the one mode that takes it
    report = export_all(trained_vit[0], str(tmp_path / "out"), formats="tflite,onnx",
                        quantizations="float32,full_integer_int8", int8_io_type="uint8", calibration_data="digits",
                        include_preprocessing=True, measure_latency=False, mediapipe=False)
    assert sorted(os.listdir(tmp_path / "out")) == ["labels.txt", "model_float32_pixels.tflite",
                                                    "model_full_integer_int8_pixels.tflite",
                                                    "model_full_integer_int8_pixels.tflite.calibration.json",
                                                    "model_pixels.onnx", "report.json"]
    assert all(r["passed"] for r in report["artifacts"])
    path = str(tmp_path / "out" / "model_float32_pixels.tflite")
    assert Interpreter(model_path=path).get_input_details()[0]["name"] == "serving_default_pixels:0"
    assert onnxruntime.InferenceSession(str(tmp_path / "out" / "model_pixels.onnx")).get_inputs()[0].name == "pixels"
    uint8 = read_metadata(str(tmp_path / "out" / "model_full_integer_int8_pixels.tflite"))["metadata"]
    description = uint8["subgraph_metadata"][0]["input_tensor_metadata"][0]["description"]
    assert "feed the uint8 RGB pixels as they are" in description and "is applied by the app" not in description
    rows = {r["name"]: r["contract"] for r in json.loads((tmp_path / "out" / "report.json").read_text())["artifacts"]}
    assert rows["model_full_integer_int8_pixels.tflite"]["input"]["dtype"] == "uint8"
    output = rows["model_full_integer_int8_pixels.tflite"]["output"]  # uint8 probabilities: how the app reads them
    assert output["dtype"] == "uint8" and output["dequantize"] == f"score = (q - {output['quantization'][1]}) * 0.00390625"
    scores = uint8["subgraph_metadata"][0]["output_tensor_metadata"][0]["description"]
    assert "as uint8: score = (q - 0) * 0.00390625" in scores
    assert rows["model_pixels.onnx"]["input"]["batch"] == "dynamic"
    assert rows["model_pixels.onnx"]["output"] == {"name": "predictions", "dtype": "float32", "kind": "probabilities"}


def test_default_metadata_says_how_to_scale(trained_vit, tmp_path):
    path = export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), metadata={"labels": NAMES})
    tensor = read_metadata(path)["metadata"]["subgraph_metadata"][0]["input_tensor_metadata"][0]
    assert "feed (p - 127.5) / 127.5 as float32, in [-1, 1]" in tensor["description"]
    options = tensor["process_units"][0]["options"]
    assert options["mean"] == [127.5] and options["std"] == [127.5]


def test_an_input_range_that_contradicts_the_models_layers_is_refused(tmp_path):
    model = keras_vit.VisionTransformer(**TINY, classes=4, include_preprocessing=True)
    with pytest.raises(ValueError, match=r"input_range \(--input-range\) -1,1 contradicts the model: its first layers "
                                         r"take 0,255 \(read from its first layers \(rescaling \(Rescaling\)"):
        export_all(model, str(tmp_path / "out"), formats="saved_model", input_range="-1,1", measure_latency=False)
    assert not os.path.exists(tmp_path / "out")
    assert parse_input_range("0.0,255.0") == PIXELS


def test_binary_classifier_decides_by_its_threshold_and_takes_a_two_class_folder(trained_vit, tmp_path):
    """A one-logit head trained on a two-class folder: accuracy by p > 0.5 (not an argmax over one column), the
    folder's second class its one label, an integer-only full_integer_int8 file (its sigmoid in float32 after the
    DEQUANTIZE) and the phone-CPU int8 file."""
    from export.tflite import float_ops

    keras.utils.set_random_seed(0)
    images, labels = trained_vit[2], trained_vit[3]
    keep = labels < 2
    x, y = (images[keep] + 1) * 127.5, labels[keep]
    binary = keras_vit.VisionTransformer(**TINY, classes=1, classifier_activation=None)
    binary.set_weights(trained_vit[0].get_weights()[:-2] + [w[..., 1:2] - w[..., 0:1] for w in trained_vit[0].get_weights()[-2:]])
    folder = _write_folder(tmp_path / "pairs", np.concatenate([x] * 4), np.concatenate([y] * 4))  # classes "0", "1"
    report = export_all(binary, str(tmp_path / "out"), formats="tflite",
                        quantizations="float32,int8,full_integer_int8", calibration_data=folder, measure_latency=False)
    assert report["labels"] == ["1"] and report["labels_source"] == "data"
    rows = {r["name"]: r for r in report["artifacts"]}
    assert rows["model_float32.tflite"]["keras_accuracy"] > 0.9  # 0 vs 1 by the trained model's logit difference
    assert rows["model_float32.tflite"]["mediapipe_accuracy"] == rows["model_float32.tflite"]["keras_accuracy"]
    for name in ("model_int8.tflite", "model_full_integer_int8.tflite"):
        assert rows[name]["passed"], rows[name]["failures"]
    assert float_ops(open(tmp_path / "out" / "model_full_integer_int8.tflite", "rb").read()) == []


def test_labels_files_are_read_as_written(trained_vit, tmp_path):
    from export.contract import read_labels_file

    (tmp_path / "bom.txt").write_text("\ufeffzero\n" + "\n".join(NAMES[1:]) + "\n\n", encoding="utf-8")
    assert read_labels_file(tmp_path / "bom.txt") == ["zero", *NAMES[1:]]
    (tmp_path / "gap.txt").write_text("a\nb\n\nc\n")
    with pytest.raises(ValueError, match=r"has a blank line at line 3, between class names"):
        read_labels_file(tmp_path / "gap.txt")
    (tmp_path / "twice.txt").write_text("\n".join(["a"] * 10))
    with pytest.raises(ValueError, match=r"`labels \(--labels\)` must be distinct. Received: 'a' more than once"):
        export_all(trained_vit[0], str(tmp_path / "out"), formats="saved_model", labels=str(tmp_path / "twice.txt"))
    with pytest.raises(ValueError, match=r"labels \(--labels\) must name each of the model's 10 classes. Received: 3"):
        export_all(trained_vit[0], str(tmp_path / "out"), formats="saved_model", labels=["a", "b", "c"])
    with pytest.raises(ValueError, match=r"`metadata\['labels'\]` must hold non-empty strings"):
        export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), metadata={"labels": ["a", ""] + NAMES[2:]})


def test_models_keras_cannot_rebuild_say_how_to_export_them(tmp_path):
    from export.signature import load_vit

    class Unregistered(keras.layers.Layer):
        def call(self, x):
            return x / 127.5 - 1.0

    vit = keras_vit.VisionTransformer(**TINY, classes=2)
    inputs = keras.Input((16, 16, 3))
    keras.Model(inputs, vit(Unregistered()(inputs))).save(tmp_path / "custom.keras")
    with pytest.raises(ValueError, match=r"holds a layer of your own that Keras cannot rebuild here: export it from "
                                         r"Python after importing the module that registers it"):
        load_vit(str(tmp_path / "custom.keras"))
    keras.Model(inputs, vit(keras.layers.Lambda(lambda x: x / 127.5 - 1.0)(inputs))).save(tmp_path / "lambda.keras")
    with pytest.raises(ValueError, match=r"holds a Lambda layer, which Keras loads only with safe_mode=False"):
        load_vit(str(tmp_path / "lambda.keras"))


def test_calibration_images_in_the_wrong_range_are_refused_up_front(trained_vit, tmp_path):
    """Issue 27's bad input: raw [0, 255] pixels for a [-1, 1] model, or [-1, 1] images for a raw-pixel model, are
    refused before any file is converted, naming the argument and the range the file takes."""
    from export import export_onnx

    vit = _trained_copy(trained_vit)
    unit = next(iter(data.digits("train", image_size=16, batch_size=64, shuffle=False)))[0].numpy()
    pixels = (unit + 1.0) * 127.5
    expected = r"the file takes \[-1, 1\] \(keras_vit.preprocess_input's scaling\)"
    with pytest.raises(ValueError, match=r"representative_data: the calibration images hold values in \[0, 255\] "
                                         r"\(raw pixels in \[0, 255\]\), and " + expected + r"\. Give images in "
                                         r"\[-1, 1\] \(keras_vit.preprocess_input scales raw pixels to it\)"):
        export_tflite(vit, str(tmp_path / "a.tflite"), quantization="int8", representative_data=pixels)
    with pytest.raises(ValueError, match="representative_data: .*raw pixels in"):
        export_onnx(vit, str(tmp_path / "a.onnx"), quantization="int8", representative_data=pixels)
    with pytest.raises(ValueError, match="calibration_data: .*raw pixels in"):
        export_all(vit, str(tmp_path / "out"), formats="tflite", quantizations="int8", measure_latency=False,
                   calibration_data=_pixel_digits("train"))
    with pytest.raises(ValueError, match=r"verification_data: the verification images hold values .*raw pixels"):
        export_tflite(vit, str(tmp_path / "b.tflite"), verification_data=pixels)
    with pytest.raises(ValueError, match="calibration_data: .*raw pixels in"):  # an array, as export_tflite takes
        export_all(vit, str(tmp_path / "out"), formats="tflite", quantizations="int8", measure_latency=False,
                   calibration_data=pixels)
    assert not any(tmp_path.iterdir())  # nothing written
    report = export_all(vit, str(tmp_path / "out"), formats="tflite", quantizations="float32", measure_latency=False,
                        calibration_data=unit, mediapipe=False)
    assert report["calibration_data"] == "NumPy array" and report["artifacts"][0]["passed"]
    with pytest.raises(ValueError, match=r"calibration_data as an array must be images \(n, 16, 16, 3\)"):
        export_all(vit, str(tmp_path / "out2"), formats="tflite", calibration_data=unit[0], measure_latency=False)
    import shutil

    shutil.rmtree(tmp_path / "out")

    raw = keras_vit.VisionTransformer(**TINY, classes=10, include_preprocessing=True)
    with pytest.raises(ValueError, match=r"already scaled to \[-1, 1\] or \[0, 1\]\), and the file takes \[0, 255\] "
                                         r"\(raw pixels\)\. Give images in \[0, 255\] \(the raw 8-bit pixel values"):
        export_tflite(raw, str(tmp_path / "c.tflite"), quantization="int8", representative_data=unit)
    # the right ranges pass, and so does noise around the range (augmented images, a seeded normal batch)
    export_tflite(raw, str(tmp_path / "c.tflite"), quantization="int8", representative_data=pixels[:8], verify=False)
    normal = np.random.default_rng(0).normal(0, 1, (8, 16, 16, 3)).astype("float32")
    export_tflite(vit, str(tmp_path / "d.tflite"), quantization="int8", representative_data=normal, verify=False)
