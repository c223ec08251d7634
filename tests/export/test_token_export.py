"""Issue 29, item 8: a backbone that outputs its token sequence exports to every format, verified token by token.

`include_top=False, pooling=None` gives `(batch, tokens, hidden_size)`: the features dense heads (detection,
segmentation) are built on. Each file is compared with Keras per token (relative difference, cosine) against
`export.tolerances.TOKEN_TOLERANCES`; agreement and accuracy do not apply, and MediaPipe's classifier is skipped.
"""

import json

import keras
import numpy as np
import pytest

import keras_vit
from export import __main__ as cli
from export.metadata import read_metadata
from export.pipeline import export_all
from export.tolerances import TOKEN_TOLERANCES, TOKENS_NOTE, compare, failures

pytestmark = pytest.mark.export


@pytest.fixture(scope="module")
def backbone(trained_vit):
    """The shared trained 16 px ViT, built as a backbone with include_top=False, pooling=None: (batch, 17, 32)."""
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                        input_shape=(16, 16, 3), include_top=False, pooling=None, name="backbone")
    weights = {v.path.split("/", 1)[1]: v for v in trained_vit[0].weights}
    for variable in model.weights:
        variable.assign(weights[variable.path.split("/", 1)[1]])
    assert model.output_shape == (None, 17, 32)
    return model


def _run_tflite(path, images):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    outputs = []
    for image in images:
        interpreter.set_tensor(inp["index"], image[None])
        interpreter.invoke()
        outputs.append(interpreter.get_tensor(out["index"])[0])
    return np.stack(outputs)


def test_a_token_sequence_exports_to_every_format_verified_per_token(backbone, trained_vit, tmp_path):
    out = tmp_path / "export"
    report = export_all(backbone, str(out), quantizations=["float32", "float16", "dynamic_int8", "int8",
                                                           "full_integer_int8"],
                        onnx_quantization=["float32", "int8"], calibration_data="digits", measure_latency=False)
    assert report["scores"] == "tokens" and report["tokens"] == 17 and report["hidden_size"] == 32
    assert report["classes"] is None
    assert report["agreement"] == TOKENS_NOTE and report["labels"] is None and not (out / "labels.txt").exists()
    rows = {row["name"]: row for row in report["artifacts"]}
    assert set(rows) == {"saved_model", "model.onnx", "model_int8.onnx"} | {
        f"model_{q}.tflite" for q in ("float32", "float16", "dynamic_int8", "int8", "full_integer_int8")}
    for name, row in rows.items():
        assert row["passed"] and row["tolerance"] == TOKEN_TOLERANCES[row["quantization"]], row
        assert "top1_agreement" not in row and "accuracy" not in row and row["agreement"] == TOKENS_NOTE
        batch = 1 if name.endswith(".tflite") else None  # .tflite files take a batch of 1
        assert row["contract"]["output"]["kind"] == "tokens" and row["contract"]["output"]["shape"] == [batch, 17, 32]
        if name.endswith(".tflite"):
            assert row["mediapipe_skipped"].startswith("skipped: MediaPipe's ImageClassifier reads classes")
    assert rows["model_float32.tflite"]["relative_max_abs_diff"] <= 2e-5
    images = trained_vit[2][:8]
    expected = backbone.predict(images, verbose=0)
    np.testing.assert_allclose(_run_tflite(out / "model_float32.tflite", images), expected, atol=1e-5)
    int8 = _run_tflite(out / "model_int8.tflite", images)
    assert int8.shape == (8, 17, 32) and compare(expected, int8)["cosine"] >= TOKEN_TOLERANCES["int8"]["cosine"]
    info = read_metadata(out / "model_float32.tflite")
    assert info["labels"] is None
    output = info["metadata"]["subgraph_metadata"][0]["output_tensor_metadata"][0]
    assert output["description"].startswith("the token sequence (1, tokens, hidden_size)")


def test_token_figures_and_their_bars():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(4, 5, 8))
    figures = compare(reference, reference + 1e-7)
    assert figures["tokens"] == 5 and figures["cosine"] > 0.999999 and not failures(figures, "float32")
    assert "top1_agreement" not in figures
    noisy = reference + rng.normal(scale=0.3, size=reference.shape)  # cosine about 0.96 a token
    assert failures(compare(reference, noisy), "int8") == [
        f"cosine = {compare(reference, noisy)['cosine']:.6g} (needs >= {TOKEN_TOLERANCES['int8']['cosine']})"]
    assert failures(compare(reference, np.repeat(noisy[:1], 4, axis=0)), "int8")[0].startswith(
        "outputs are the same for every image")


def test_cli_exports_a_backbone_and_says_once_why_mediapipe_is_skipped(backbone, tmp_path, capsys):
    path = tmp_path / "backbone.keras"
    backbone.save(path)
    out = tmp_path / "cli"
    assert cli.main([str(path), "--quantization", "float32", "--output-dir", str(out), "--no-latency"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("MediaPipe ImageClassifier check skipped") == 1 and "| model_float32.tflite |" in printed
    assert json.loads((out / "report.json").read_text())["scores"] == "tokens"
    (tmp_path / "names.txt").write_text("".join(f"feature {i}\n" for i in range(32)))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        cli.main([str(path), "--labels", str(tmp_path / "names.txt"), "--output-dir", str(tmp_path / "bad")])
    assert exit.value.code == 2
    assert "the model outputs a token sequence" in capsys.readouterr().err


def test_an_untrained_no_top_backbone_exports_from_the_command_line(tmp_path):
    """The fresh-user review's case, refused until issue 29: include_top=False's token sequence, untrained."""
    tiny = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16, input_shape=(16, 16, 3))
    keras_vit.VisionTransformer(include_top=False, **tiny).save(tmp_path / "backbone.keras")
    out = tmp_path / "export"
    # random weights: the float modes (int8's bar is for a trained model's features, as for classifiers)
    assert cli.main([str(tmp_path / "backbone.keras"), "--quantization", "float32,float16,dynamic_int8",
                     "--output-dir", str(out), "--no-latency", "--no-mediapipe"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["tokens"] == 17 and all(row["passed"] for row in report["artifacts"])
    assert {row["name"] for row in report["artifacts"]} >= {"saved_model", "model_dynamic_int8.tflite", "model.onnx"}
