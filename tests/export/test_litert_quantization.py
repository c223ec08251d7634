"""TFLite modes made by LiteRT Quantizer: int16x8, weight_only_int8, weight_only_int4 (issue 11, item 4).

Tensor types are read from the flatbuffer with TensorFlow's schema, independently of
`export.litert_quantization.quantized_weight_types`; outputs are compared with the Keras model.
"""

import os
import sys

import keras
import numpy as np
import pytest

import keras_vit
from export import tflite
from export.fast_path import fast_path, matrix_products_on_xnnpack
from export.pipeline import format_table
from export.tolerances import TOLERANCES
from export.verify import Artifact, VerificationError
from export.runtimes import run_artifact
from export.signature import ServingGraph
from keras_vit import data

pytest.importorskip("litert_quantizer")
NEW_MODES = ("int16x8", "int8_mixed16", "weight_only_int8", "weight_only_int4", "dynamic_int4")


def _tensors(content):
    """[(name, type name, is constant, per-channel scale count, shape)] of the flatbuffer's first subgraph."""
    from tensorflow.lite.python import schema_py_generated as schema

    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(bytearray(content), 0))
    names = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    rows = []
    for tensor in model.subgraphs[0].tensors:
        buffer = model.buffers[tensor.buffer]
        constant = buffer.data is not None and len(buffer.data) > 0
        scales = 0 if tensor.quantization is None or tensor.quantization.scale is None else len(tensor.quantization.scale)
        rows.append((tensor.name.decode(), names[tensor.type], constant, scales, tuple(tensor.shape)))
    return rows


def _ops(content):
    """[(op name, [input tensor indices], [output tensor indices])] as LiteRT reads them."""
    from ai_edge_litert.interpreter import Interpreter

    return [(op["op_name"], list(op["inputs"]), list(op["outputs"])) for op in Interpreter(model_content=content)._get_ops_details()]


@pytest.fixture(scope="module")
def calibration():
    """200 training digits at 16 px in [-1, 1]: the int8 and int16x8 calibration images."""
    train = data.digits("train", image_size=16, batch_size=64, seed=0)
    return np.concatenate([x.numpy() for x, _ in train.take(4)])[:200]


@pytest.fixture(scope="module")
def files(trained_vit, calibration):
    """The trained tiny ViT's float32 file and its three LiteRT Quantizer files (bytes), from one serving graph."""
    with ServingGraph(trained_vit[0], batch_size=1, scores="logits") as graph:
        return {q: tflite.convert(graph, q, calibration, progress=False) for q in ("float32", *NEW_MODES)}


def test_int16x8_file_has_int16_activations_int8_weights_and_float_io(files):
    tensors = _tensors(files["int16x8"])
    ops = _ops(files["int16x8"])
    fc = [op for op in ops if op[0] == "FULLY_CONNECTED"]
    assert len(fc) >= 6  # patch projection, q, k, v, attention output, 2 MLP, head
    for _, inputs, outputs in fc:
        assert tensors[inputs[0]][1] == "INT16" and tensors[outputs[0]][1] == "INT16"
        weight = tensors[inputs[1]]
        assert weight[1] == "INT8" and weight[2] and weight[3] == weight[4][0] > 1  # constant, one scale per output unit
    activation_types = {tensors[o][1] for name, _, outs in ops for o in outs if name not in ("DEQUANTIZE",)}
    assert activation_types <= {"INT16", "INT32"}, activation_types  # every op but the final DEQUANTIZE
    names = [name for name, _, _ in ops]
    assert names[0] == "QUANTIZE" and names[-1] == "DEQUANTIZE"
    assert tensors[ops[0][1][0]][1] == "FLOAT32" and tensors[ops[-1][2][0]][1] == "FLOAT32"  # float32 I/O


def test_int16x8_calibration_is_the_envelope_of_every_image_not_a_moving_average(trained_vit, calibration):
    # LiteRT Quantizer's one-call calibration keeps a moving average of each image's extremes, which clipped
    # ViT-Ti/16's LayerNorm statistics; calibrate_min_max must give every tensor's true range over the images
    from ai_edge_litert.interpreter import Interpreter
    from litert_quantizer import Quantizer

    from export.litert_quantization import calibrate_min_max, recipe

    with ServingGraph(trained_vit[0], batch_size=1, scores="logits") as graph:
        float_content = tflite.convert(graph, "float32", progress=False)
    images = calibration[:12]
    interpreter = Interpreter(model_content=float_content)
    (key, signature), = interpreter.get_signature_list().items()
    (input_name,) = signature["inputs"]
    merged = calibrate_min_max(float_content, recipe("int16x8"), key, input_name, images, 1)
    # independent: every tensor of a float run, all intermediates kept, image by image
    interpreter = Interpreter(model_content=float_content, experimental_preserve_all_tensors=True)
    interpreter.allocate_tensors()
    details = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    low, high = {}, {}
    for image in images:
        interpreter.set_tensor(interpreter.get_input_details()[0]["index"], image[None])
        interpreter.invoke()
        for name in merged:
            value = interpreter.get_tensor(details[name])
            low[name] = min(low.get(name, np.inf), float(value.min()))
            high[name] = max(high.get(name, -np.inf), float(value.max()))
    activations = [n for n in merged if np.size(merged[n]["min"]) == 1]
    assert len(activations) > 20
    for name in activations:
        np.testing.assert_allclose(float(np.squeeze(merged[name]["min"])), low[name], rtol=1e-5, atol=1e-6, err_msg=name)
        np.testing.assert_allclose(float(np.squeeze(merged[name]["max"])), high[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # the library's own calibration of the same images in one call is narrower somewhere (a moving average)
    steps = [{input_name: images[i : i + 1]} for i in range(len(images))]
    default = Quantizer(float_content, recipe("int16x8")).calibrate({key: steps}, num_threads=1)
    assert any(float(np.squeeze(default[n]["max"])) < high[n] - 1e-3 * max(1.0, abs(high[n])) for n in activations)


@pytest.mark.parametrize("quantization,bits", [("weight_only_int8", "INT8"), ("weight_only_int4", "INT4")])
def test_weight_only_files_keep_float_compute_with_per_channel_integer_weights(files, quantization, bits):
    tensors = _tensors(files[quantization])
    ops = _ops(files[quantization])
    dequantized = [tensors[ins[0]] for name, ins, _ in ops if name == "DEQUANTIZE"]
    assert len(dequantized) >= 6 and all(t[1] == bits and t[2] and t[3] == t[4][0] > 1 for t in dequantized)
    for name, inputs, outputs in ops:  # compute stays float32: every op's activation input and output
        if name != "DEQUANTIZE":
            assert tensors[outputs[0]][1] in ("FLOAT32", "INT32"), (name, tensors[outputs[0]])
    float_weights = [t for t in tensors if t[2] and t[1] == "FLOAT32" and len(t[4]) == 2 and min(t[4]) > 1]
    assert not float_weights, float_weights  # no 2-D float32 weight matrix is left


def test_dynamic_int4_keeps_int4_weights_in_the_matmuls_and_xnnpack_runs_them(files, tmp_path):
    from export.profile import tflite_profile

    tensors = _tensors(files["dynamic_int4"])
    ops = _ops(files["dynamic_int4"])
    assert "DEQUANTIZE" not in [name for name, _, _ in ops]  # no float copy of a weight at run time
    fc = [op for op in ops if op[0] == "FULLY_CONNECTED"]
    assert len(fc) >= 6
    for _, inputs, outputs in fc:  # float activations in and out, a constant int4 weight with one scale per unit
        weight = tensors[inputs[1]]
        assert tensors[inputs[0]][1] == tensors[outputs[0]][1] == "FLOAT32"
        assert weight[1] == "INT4" and weight[2] and weight[3] == weight[4][0] > 1
    path = tmp_path / "dynamic_int4.tflite"
    path.write_bytes(files["dynamic_int4"])
    profile = tflite_profile(str(path), measure_latency=False)
    rows = {row["op"]: row for row in profile["ops"]}
    assert rows["FULLY_CONNECTED"]["xnnpack"] == len(fc)  # weight_only_int4's FULLY_CONNECTED stay off XNNPACK
    _check_fast_path_label(fast_path("tflite", "dynamic_int4"), profile)
    path = tmp_path / "weight_only_int4.tflite"
    path.write_bytes(files["weight_only_int4"])
    _check_fast_path_label(fast_path("tflite", "weight_only_int4"), tflite_profile(str(path), measure_latency=False))
    assert len(files["dynamic_int4"]) <= 1.02 * len(files["weight_only_int4"])  # the same int4 weights


def test_int8_mixed16_is_integer_only_with_int16_where_a_vit_needs_it(files, tmp_path):
    """Issue 27: int8 matrix products (on XNNPACK, symmetric attention operands) and GELU; int16 LayerNorm arithmetic,
    residual adds and softmax; no float op between the input's QUANTIZE and the output's DEQUANTIZE."""
    from export.profile import tflite_profile

    content = files["int8_mixed16"]
    assert tflite.float_ops(content) == []
    tensors = _tensors(content)
    kinds = {}
    for op, _, outputs in _ops(content):
        name, kind = tensors[outputs[0]][:2]
        kinds.setdefault(op, set()).add(kind)
        if op in ("RSQRT", "SUB", "MEAN"):
            assert "norm" in name and kind == "INT16", (op, name, kind)
    assert kinds["FULLY_CONNECTED"] == kinds["BATCH_MATMUL"] == kinds["GELU"] == {"INT8"}
    assert kinds["SOFTMAX"] == kinds["RSQRT"] == {"INT16"} and kinds["ADD"] == {"INT16"}
    assert kinds["DEQUANTIZE"] == {"FLOAT32"} and {"INT8", "INT16"} <= kinds["QUANTIZE"]
    path = tmp_path / "int8_mixed16.tflite"
    path.write_bytes(content)
    profile = tflite_profile(str(path), measure_latency=False)
    on_xnnpack, products = matrix_products_on_xnnpack(profile)
    assert products >= 8 and on_xnnpack == products
    _check_fast_path_label(fast_path("tflite", "int8_mixed16"), profile)
    rows = {row["op"]: row for row in profile["ops"]}
    assert rows["SOFTMAX"]["xnnpack"] == rows["RSQRT"]["xnnpack"] == 0  # the int16 ops: what makes it slow on a CPU


def test_int8_mixed16_with_a_dynamic_batch_is_refused_up_front(trained_vit, calibration, tmp_path):
    with pytest.raises(ValueError, match=r"quantization='int8_mixed16' needs batch_size=1"):
        tflite.export_tflite(trained_vit[0], str(tmp_path / "m.tflite"), "int8_mixed16",
                             representative_data=calibration, batch_size=None)
    assert os.listdir(tmp_path) == []


def test_balanced_graph_leaves_a_wrapped_vit_alone(trained_vit, calibration):
    from export.reparameterize import balanced_graph

    inner = trained_vit[0]
    wrapped = keras.Sequential([keras.Input(inner.input_shape[1:]), keras.layers.Identity(), inner])
    with ServingGraph(wrapped, batch_size=1, scores="logits") as graph:
        assert balanced_graph(graph, calibration) == (graph, False)
    with ServingGraph(inner, batch_size=1, scores="logits") as graph:
        new, owned = balanced_graph(graph, calibration)
        try:
            assert owned and new.model is not graph.model and new.scores == "logits" and new.batch_size == 1
            np.testing.assert_allclose(new.predict(calibration[:8]), graph.predict(calibration[:8]), rtol=0, atol=1e-4)
        finally:
            new.close()


def _check_fast_path_label(label, profile):
    """Issue 27: export.fast_path's label holds in the file's op profile: an XNNPACK file has every matrix product on
    XNNPACK; a file on reference kernels has no FULLY_CONNECTED there."""
    if "reference kernels only" in label or "for its matrix products" in label:
        on_xnnpack, products = matrix_products_on_xnnpack(profile, ("FULLY_CONNECTED",))
        assert products >= 3 and on_xnnpack == 0, (label, on_xnnpack, products)
    else:
        on_xnnpack, products = matrix_products_on_xnnpack(profile)
        assert label.startswith("XNNPACK") or "(matrix products on XNNPACK)" in label, label
        assert products >= 5 and on_xnnpack == products, (label, on_xnnpack, products)


def _wide_vit():
    """Random ViT whose Dense kernels hold 95% of its ~0.4M parameters; a random head (keras_vit's is zero)."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=8, hidden_size=128, num_layers=2, num_heads=2, mlp_dim=512,
                                        input_shape=(16, 16, 3), classes=128, classifier_activation=None)
    head = model.get_layer("predictions")
    head.set_weights([np.random.default_rng(1).normal(0, 0.3, w.shape).astype("float32") for w in head.get_weights()])
    return model


def test_weight_only_int4_halves_the_weight_bytes_and_is_below_a_fifth_of_float32():
    """On a model whose Dense kernels are 95% of its parameters: int4 weights are half a byte each."""
    model = _wide_vit()
    dense = sum(int(np.prod(w.shape)) for w in model.weights if len(w.shape) >= 2 and "kernel" in w.path)
    assert dense / model.count_params() > 0.95
    with ServingGraph(model, batch_size=1, scores="logits") as graph:
        sizes = {q: len(tflite.convert(graph, q, progress=False))
                 for q in ("float32", "weight_only_int8", "weight_only_int4")}
    # float32 ~ 4 bytes per parameter; int8 ~ 1 and int4 ~ 0.5 per kernel entry, plus per-channel scales
    assert sizes["float32"] >= 4 * model.count_params()
    assert sizes["weight_only_int4"] <= 0.2 * sizes["float32"]
    saved = sizes["weight_only_int8"] - sizes["weight_only_int4"]
    assert 0.45 * dense <= saved <= 0.55 * dense, (saved, dense, sizes)


# measured on the tests' 96 held-out digits (logits): raw top-1 agreement with Keras and mean cosine (int16x8
# with LiteRT Quantizer's own moving-average calibration: 0.969, 0.994)
MEASURED = {"int16x8": (1.0, 0.9995), "int8_mixed16": (0.99, 0.9986), "weight_only_int8": (1.0, 0.9999), "weight_only_int4": (0.958, 0.967),
            "dynamic_int4": (0.958, 0.967)}


@pytest.mark.parametrize("quantization", NEW_MODES)
def test_mode_exports_verifies_and_classifies_like_keras(trained_vit, calibration, tmp_path, quantization):
    model, _, images, labels = trained_vit
    path = str(tmp_path / f"model_{quantization}.tflite")
    tflite.export_tflite(model, path, quantization, representative_data=calibration, verification_data=images,
                         scores="logits", progress=False)  # raises unless it passes TOLERANCES[quantization]
    outputs = run_artifact(Artifact("m", "tflite", path, quantization), images)
    reference = np.asarray(model.predict(images, verbose=0))
    assert outputs.shape == reference.shape == (len(images), 10)
    agreement = (outputs.argmax(-1) == reference.argmax(-1)).mean()
    cosine = ((outputs * reference).sum(-1) / np.linalg.norm(outputs, axis=-1) / np.linalg.norm(reference, axis=-1)).mean()
    print(quantization, agreement, cosine)
    assert agreement >= MEASURED[quantization][0] - 0.03 and cosine >= MEASURED[quantization][1] - 0.01


def test_a_file_that_fails_verification_leaves_no_file(trained_vit, tmp_path, monkeypatch):
    model, _, images, _ = trained_vit
    monkeypatch.setitem(TOLERANCES, "weight_only_int8", {"decisive_top1_agreement": 1.01})  # unreachable
    path = tmp_path / "model_weight_only_int8.tflite"
    with pytest.raises(VerificationError, match="weight_only_int8"):
        tflite.export_tflite(model, str(path), "weight_only_int8", verification_data=images, progress=False)
    assert os.listdir(tmp_path) == []


def test_int16x8_is_no_longer_refused_and_tensorflows_name_points_to_it(tmp_path):
    for q in NEW_MODES:
        tflite.check_quantization(q)
    with pytest.raises(ValueError, match="'int16x8'"):
        tflite.check_quantization("16x8")
    with pytest.raises(ValueError, match="needs representative_data"):
        tflite.export_tflite(keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2,
                                                         mlp_dim=64, input_shape=(8, 8, 3), classes=3),
                             str(tmp_path / "m.tflite"), "int16x8")
    assert os.listdir(tmp_path) == []


def test_missing_package_is_named_up_front(trained_vit, tmp_path, monkeypatch, capsys):
    from export import __main__ as cli

    monkeypatch.setitem(sys.modules, "litert_quantizer", None)  # `import litert_quantizer` raises ImportError
    for q in (*NEW_MODES, "int8"):  # int8, the phone-CPU file, is LiteRT Quantizer's too (issue 45)
        with pytest.raises(ValueError, match="pip install litert-quantizer"):
            tflite.check_quantization(q)
    tflite.check_quantization("full_integer_int8")  # TensorFlow's modes do not need it
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        cli.main([trained_vit[1], "--formats", "tflite", "--quantization", "float32,weight_only_int4",
                  "--output-dir", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "weight_only_int4" in err and "pip install litert-quantizer" in err
    assert not out.exists()


def test_export_all_makes_verifies_profiles_and_reports_the_new_modes(trained_vit, tmp_path):
    """Through `export_all`: int16x8 calibrated on the same digits as int8 (both LiteRT Quantizer's); each file
    verified, sized, profiled and classified in MediaPipe's ImageClassifier (float32 I/O, so it runs all three)."""
    from export.pipeline import export_all

    report = export_all(trained_vit[0], str(tmp_path / "out"), formats="tflite",
                        quantizations="float32,int8,int16x8,weight_only_int8", calibration_data="digits",
                        measure_latency=False, profile=True)
    rows = {row["quantization"]: row for row in report["artifacts"]}
    assert set(rows) == {"float32", "int8", "int16x8", "weight_only_int8"}
    for q in ("int16x8", "weight_only_int8"):
        row = rows[q]
        assert row["passed"] and os.path.getsize(row["path"]) > 0
        assert row["tolerance"] == TOLERANCES[q]
        assert row["decisive_top1_agreement"] >= TOLERANCES[q]["decisive_top1_agreement"]
        assert os.path.getsize(row["path"]) < 0.75 * os.path.getsize(rows["float32"]["path"])
        profile = row["profile"]
        assert profile["num_ops"] == len(_ops(open(row["path"], "rb").read()))
        assert sum(op["count"] for op in profile["ops"]) == profile["num_ops"]
        if "mediapipe_skipped" not in row:  # mediapipe installed: it runs the file like LiteRT
            assert "mediapipe_unsupported" not in row, row.get("mediapipe_unsupported")
            assert row["mediapipe_top1_agreement"] >= 0.95 and row["mediapipe_max_score_sum_error"] < 1e-3
    int16_types = {t for op in rows["int16x8"]["profile"]["ops"] for t in op["output_types"]}
    assert "int16" in int16_types
    # issue 27: where each file runs fast, in the report and the table, is what its op profile measures
    for q, row in rows.items():
        assert row["runs_fast_on"] == fast_path("tflite", q)
        _check_fast_path_label(row["runs_fast_on"], row["profile"])
    assert rows["int16x8"]["runs_fast_on"].startswith("reference kernels only")
    assert all(f"| {fast_path('tflite', q)} | yes |" in format_table(report) for q in rows)


def test_a_recipe_that_quantises_nothing_fails_instead_of_writing_a_float_file(files, monkeypatch):
    """LiteRT Quantizer 0.11's policy drops a weight-only blockwise int4 config without a word (docs/traps.md)."""
    from litert_quantizer import qtyping
    from litert_quantizer.recipe_manager import RecipeManager

    from export import litert_quantization

    def blockwise_weight_only(quantization, keep_float=()):
        manager = RecipeManager()
        manager.add_weight_only_config(".*", qtyping.TFLOperationName.ALL_SUPPORTED, 4, qtyping.QuantGranularity.BLOCKWISE_32)
        return manager.get_quantization_recipe()

    monkeypatch.setattr(litert_quantization, "recipe", blockwise_weight_only)
    with pytest.raises(RuntimeError, match="left no quantised weight in the 'weight_only_int4' file"):
        litert_quantization.quantize(files["float32"], "weight_only_int4")


def test_large_quantised_weights_survive_the_metadata_writer(tmp_path):
    """LiteRT Quantizer puts the buffers of a model with over 256 KiB of weights after the flatbuffer, which
    tflite-support's metadata writer dropped ("Input tensor ... lacks data"); `inline_buffers` keeps them inside."""
    model = _wide_vit()
    images = np.random.default_rng(0).uniform(-1, 1, (16, 16, 16, 3)).astype("float32")
    path = str(tmp_path / "model_weight_only_int8.tflite")
    tflite.export_tflite(model, path, "weight_only_int8", metadata={"labels": [f"c{i}" for i in range(128)]},
                         verification_data=images, scores="logits", progress=False)
    assert os.path.getsize(path) > model.count_params()  # about a byte per weight, all in the file
    outputs = run_artifact(Artifact("m", "tflite", path, "weight_only_int8"), images)
    reference = np.asarray(model.predict(images, verbose=0))
    assert np.abs(outputs - reference).max() < 0.02 * np.abs(reference).max()
    import zipfile

    with zipfile.ZipFile(path) as packed:  # the metadata's associated files are zipped onto the flatbuffer
        assert "labels.txt" in packed.namelist()


def test_quant_error_benchmark_measures_each_ops_snr_against_float32(files, tmp_path):
    # smoke test of `python -m benchmarks.quant_error` (issue 11's int16x8 finding) on the tiny model
    from benchmarks import quant_error

    paths = {}
    for q in ("float32", "weight_only_int8", "int16x8"):
        paths[q] = str(tmp_path / f"{q}.tflite")
        with open(paths[q], "wb") as f:
            f.write(files[q])
    images = np.concatenate([x.numpy() for x, _ in data.digits("validation", image_size=16, batch_size=2,
                                                               shuffle=False).take(1)])
    result = quant_error.measure(paths["float32"], [paths["float32"], paths["int16x8"]], images)
    same = result["float32.tflite"]
    assert same["output_db"] == 200 and {db for _, db in same["by_op"].values()} == {200}  # a file against itself
    assert "FULLY_CONNECTED" in result["int16x8.tflite"]["by_op"] and result["int16x8.tflite"]["output_db"] < 200
    local = {q: quant_error.local_snr(paths[q], images) for q in ("weight_only_int8", "int16x8")}
    # float compute: only float32 rounding against float64 (over 100 dB); int16 products keep ~15 bits (over 60 dB)
    assert min(min(v) for v in local["weight_only_int8"].values()) > 100
    assert np.median(local["int16x8"]["MUL"]) > 60
    table = quant_error.local_markdown(local)
    assert "| MEAN |" in table and "| SOFTMAX |" in table
    assert "**model output**" in quant_error.markdown(result)
    # layer by layer (issue 27): the tiny model's one block, its layers in execution order
    assert quant_error._layer_of("vision_transformer_1/transformer_block_11_1/norm_2_1/mul_2") == (11, "norm_2")
    assert quant_error._layer_of("vision_transformer_1/transformer_block_0_1/add_1") == (0, "add_1")
    assert quant_error._layer_of("vision_transformer_1/patch_encoder_1/concat") is None
    rows = quant_error.by_layer(paths["float32"], paths["int16x8"], images)
    layers = [layer for _, layer, _, _ in rows]
    assert {block for block, _, _, _ in rows} == {0} and layers.index("norm_1") < layers.index("attention") < \
        layers.index("norm_2"), layers
    assert all(20 < db < 200 for _, _, _, db in rows), rows  # int16 activations: below float's 200, far above noise
    assert [db for _, _, _, db in quant_error.by_layer(paths["float32"], paths["float32"], images)] == [200] * len(rows)
    assert "| 0 | norm_1 (" in quant_error.layer_markdown({"int16x8": rows})


def test_int16x8_calibration_warns_nothing_on_a_terminal_either(files, calibration, monkeypatch):
    """LiteRT warned "Enabling `experimental_preserve_all_tensors` ... is intended for debugging purposes only" on
    every int16x8 export: printed on a terminal (LiteRT Quantizer's bars are shown there), not a fault of the model."""
    import warnings

    from export.litert_quantization import quantize

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quantize(files["float32"], "int16x8", calibration[:4], progress=True)
    assert [str(w.message)[:80] for w in caught] == []
