"""The benchmark harness runs and reports every figure (no time is asserted: speed lives in benchmarks/)."""

import json
import os

import keras
import numpy as np
import pytest

from benchmarks.throughput_tables import best_settings, files_against_torch, headline
from benchmarks.run import vit_flops


def test_flop_count_matches_published_macs():
    # timm's table (CHECKPOINTS.md): ViT-B/16 17.58 GMACs at 224, Ti/16 1.26; FLOPs = 2 x MACs.
    assert vit_flops(768, 12, 3072, 16, 224) / 2 / 1e9 == pytest.approx(17.58, rel=0.01)
    assert vit_flops(192, 12, 768, 16, 224) / 2 / 1e9 == pytest.approx(1.26, rel=0.01)


def test_headline_ratio_uses_the_best_peer_of_the_same_configuration():
    rows = [
        {"section": "train", "implementation": "keras_vit", "model": "Ti16", "precision": "float32", "xla": "on",
         "batch": 8, "images_per_s": 10.0},
        {"section": "train", "implementation": "keras-hub", "model": "Ti16", "precision": "float32", "xla": "on",
         "batch": 8, "images_per_s": 8.0},
        {"section": "train", "implementation": "torch", "model": "Ti16", "precision": "float32", "xla": "n/a",
         "batch": 8, "images_per_s": 12.5},
        {"section": "train", "implementation": "keras-hub", "model": "Ti16", "precision": "float32", "xla": "off",
         "batch": 8, "images_per_s": 99.0},  # another configuration: ignored
    ]
    (h,) = headline(rows)
    assert h["best_peer"] == "torch" and h["ratio"] == pytest.approx(0.8)
    rows.append({"section": "train", "implementation": "keras_vit", "model": "Ti16", "precision": "float32",
                 "xla": "off", "batch": 8, "images_per_s": 11.0})
    (b,) = best_settings(rows)  # each side's fastest setting: keras_vit XLA off, keras-hub XLA off
    assert (b["keras_vit_xla"], b["best_peer"], b["best_peer_xla"]) == ("off", "keras-hub", "off")
    assert b["ratio"] == pytest.approx(11.0 / 99.0)
    # keras_vit on another backend is keras_vit's best setting where faster, never a peer of the headline
    rows.append({"section": "train", "implementation": "keras_vit (JAX)", "model": "Ti16", "precision": "float32",
                 "xla": "on", "batch": 8, "images_per_s": 150.0})
    (b,) = best_settings(rows)
    assert (b["keras_vit_setting"], b["keras_vit"], b["best_peer"]) == ("JAX", 150.0, "keras-hub")
    assert [h["best_peer"] for h in headline(rows)] == ["keras-hub", "torch"]  # XLA off, on: never keras_vit (JAX)


def test_exported_files_are_set_against_the_fastest_pytorch_peer_only():
    def row(section, impl, rate, batch=1):
        return {"section": section, "implementation": impl, "model": "Ti16", "precision": "float32", "xla": "n/a",
                "batch": batch, "images_per_s": rate}

    rows = [row("artifacts", "TFLite float32 (LiteRT, 2 threads)", 100.0), row("artifacts", "ONNX Runtime", 80.0),
            row("artifacts", "TFLite int8 (LiteRT, 1 thread)", 500.0),  # not a float32 file: not counted
            row("infer", "HF transformers (PyTorch)", 50.0), row("infer", "HF transformers (torch.compile)", 40.0),
            row("infer", "keras_vit (PyTorch backend)", 60.0), row("infer", "keras-hub", 99.0),  # not PyTorch peers
            row("artifacts", "ONNX Runtime", 30.0, batch=8)]  # no PyTorch figure at batch 8: no row
    (h,) = files_against_torch(rows)
    assert (h["file"], h["torch"], h["ratio"]) == ("TFLite float32 (LiteRT, 2 threads)", "HF transformers (PyTorch)", 2.0)


def test_matmul_profile_times_the_block_shapes_and_all_engines_compute_the_same_product():
    from benchmarks.profile_matmul import WIDTHS, _engines, markdown, profile, shapes

    cases = shapes(WIDTHS, (1, 8))
    assert ("B16 b8 mlp_1", 8 * 197, 768, 3072) in cases and ("Ti16 b1 qkv", 197, 192, 576) in cases
    assert len(cases) == 3 * 2 * 3
    outs = {name: np.asarray(run()) for name, run in _engines(40, 24, 56, chain=4).items()}
    assert set(outs) == {"TensorFlow+XLA", "TensorFlow (oneDNN)", "PyTorch"}
    for out in outs.values():
        assert out.shape == (40, 24)
        assert 0.1 < np.abs(out).mean() < 10  # the chain keeps the scale: a real product, not underflow
        np.testing.assert_allclose(out, outs["PyTorch"], rtol=1e-4, atol=1e-5)
    bf16 = {name: np.asarray(run()) for name, run in _engines(40, 24, 56, chain=2, dtype="bfloat16").items()}
    for out in bf16.values():  # bfloat16 keeps 8 bits of mantissa
        np.testing.assert_allclose(out, _engines(40, 24, 56, chain=2)["PyTorch"](), rtol=0.05, atol=0.05)
    results = profile([("tiny", 40, 24, 56)], chain=2, rounds=2)
    assert all(rate > 0 for rate in results[0][4].values())
    assert markdown(results).splitlines()[2].startswith("| tiny | 40 x 24 x 56 |")


def test_every_figure_gets_its_own_process_and_a_failed_one_is_reported_not_fatal(capsys):
    from benchmarks.run import SIZES, jobs, run_isolated

    listed = jobs({"Ti16": SIZES["Ti16"], "B16": SIZES["B16"]}, ["train", "infer", "artifacts"])
    train = [j for j in listed if j["kind"] == "train"]
    assert len(train) == 2 * 2 * (2 * 2 + 2 + 2)  # models x precisions x (XLA x 2 Keras, 2 backends, 2 PyTorch)
    assert {j.get("backend") for j in train} == {None, "jax", "torch"}
    # infer: TensorFlow's, torch.compile's, JAX's and the PyTorch backend's process per model; artifacts: one each
    assert [j["model"] for j in listed if j["kind"] != "train"] == ["Ti16"] * 4 + ["B16"] * 4 + ["Ti16", "B16"]
    settings = {"models": {"Ti16": SIZES["Ti16"]}, "image": 32, "batch": 1, "steps": 1, "warmup": 0,
                "peaks": {"float32": 1.0, "bfloat16": 1.0}}
    assert run_isolated({"kind": "infer", "model": "unknown"}, settings) == []
    assert "its figures are missing" in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["--steps", "0"], "--steps must be >= 1. Received: 0"),
    (["--warmup", "0"], "--warmup must be >= 1. Received: 0"),
    (["--image-size", "40"], "--image-size must be a multiple of 16"),
    (["--quick", "--models", "Ti16"], "--quick sets its own model, size and steps; drop --models"),
    (["--models", "Ti16", "--update-results"], "--update-results needs a full run"),
    (["--sections", "train,infer,edge", "--update-results"], "--update-results needs a full run"),
    (["--update-results", "--output-dir", "elsewhere"], "--update-results writes the current results to"),
    (["--update-readme"], "unrecognized arguments: --update-readme"),  # renamed: no script writes the README
    (["--sections", "nope"], "--sections: unknown nope"),
])
def test_bad_arguments_exit_2_before_measuring_anything(argv, message, capsys):
    from benchmarks.run import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_the_results_tables_take_a_full_run_without_the_edge_section(monkeypatch):
    from benchmarks import run

    class Measuring(Exception):
        pass

    def peak(*args, **kwargs):
        raise Measuring  # past every argument check: the run would measure now

    monkeypatch.setattr(run, "matmul_peak", peak)
    with pytest.raises(Measuring):
        run.main(["--sections", "train,infer,artifacts", "--update-results"])


def _readme():
    from benchmarks import run

    with open(os.path.join(run.HERE, "README.md"), "rb") as f:
        return f.read()


def test_only_update_results_replaces_the_current_results_and_no_run_writes_the_readme(monkeypatch, tmp_path):
    from benchmarks import run
    from benchmarks.throughput_tables import markdown

    readme = _readme()
    results, scratch = tmp_path / "results", tmp_path / "scratch"
    monkeypatch.setattr(run, "RESULTS", str(results))  # the real benchmarks/results/ is never touched
    monkeypatch.setattr(run, "SCRATCH", str(scratch))
    monkeypatch.setattr(run, "matmul_peak", lambda dtype, n=4096, repeats=5: (100.0, "test"))
    peaks = {"float32": 100.0, "bfloat16": 100.0}
    monkeypatch.setattr(run, "run_isolated", lambda job, settings: [
        run._row(job["kind"], "keras_vit", job["model"], "float32", "on", 1, 10.0, 1e9, peaks)])
    full = ["--sections", "train,infer,artifacts"]
    # a full run without the flag: runs/bench, the current results left as they are
    assert run.main(full) is not None
    assert sorted(os.listdir(scratch)) == ["latest.json", "latest.md"] and not results.exists()
    assert run.main([*full, "--output-dir", str(tmp_path / "other")]) is not None
    assert sorted(os.listdir(tmp_path / "other")) == ["latest.json", "latest.md"] and not results.exists()
    result = run.main([*full, "--update-results"])
    assert sorted(os.listdir(results)) == ["latest.json", "latest.md"]  # no temporary file left
    assert json.loads((results / "latest.json").read_text())["rows"] == result["rows"] != []
    assert (results / "latest.md").read_text() == markdown(result) + "\n"
    assert _readme() == readme


def test_recipes_update_results_needs_a_full_run(monkeypatch, tmp_path, capsys):
    from benchmarks import recipes

    monkeypatch.setattr(recipes, "CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(recipes, "RESULTS_TABLE", str(tmp_path / "recipes.md"))
    monkeypatch.setattr(recipes, "run_all", lambda *a, **k: pytest.fail("trained before the arguments were checked"))
    for argv in (["--models", "cnn"], ["--seeds", "0"], ["--epochs", "5"], ["--recipes", "paper"]):
        with pytest.raises(SystemExit) as exit_info:
            recipes.main([*argv, "--update-results"])
        assert exit_info.value.code == 2 and "--update-results needs a full run" in capsys.readouterr().err, argv
    with pytest.raises(SystemExit) as exit_info:  # --cached: every run of the table must be in the cache
        recipes.main(["--cached", "--update-results"])
    assert exit_info.value.code == 2 and "42 of the 42 runs are not in" in capsys.readouterr().err
    assert not (tmp_path / "recipes.md").exists()


def test_recipes_update_results_writes_the_current_results_file_not_the_readme(monkeypatch, tmp_path):
    from benchmarks import recipes

    readme = _readme()
    cache, path = tmp_path / "cache", tmp_path / "results" / "recipes.md"
    cache.mkdir()
    monkeypatch.setattr(recipes, "CACHE", str(cache))
    monkeypatch.setattr(recipes, "RESULTS_TABLE", str(path))  # the real benchmarks/results/ is never touched
    for seed in (0, 1, 2):
        for model in recipes.MODELS:
            for recipe in recipes.recipes_for(model, recipes.DEFAULT_RECIPES):
                run = {"model": model, "recipe": recipe, "seed": seed, "epochs": 30, "accuracy": 0.9 + 0.01 * seed,
                       "epoch_seconds": 1.0, "parameters": 1000, "train_seconds": 30.0}
                if seed:  # runs that recorded when and where they ran; seed 0's were cached before that
                    run.update(measured=f"2026-12-0{seed}", cpu="Test CPU (no VNNI, no AMX)")
                (cache / f"{model}-{recipe}-s{seed}.json").write_text(json.dumps(run))
    assert recipes.main(["--cached", "--update-results"]) == 0
    results = recipes.cached(recipes.MODELS, recipes.DEFAULT_RECIPES, [0, 1, 2], 30)
    text = path.read_text()
    assert text == recipes.results_text(results, recipes.table(results))
    assert text.splitlines()[0] == ("# Training recipes on digits, 2026-12-01, 2026-12-02, date not recorded, "
                                    "Test CPU (no VNNI, no AMX), CPU not recorded")
    assert recipes.table(results) in text
    assert "| cnn | 1,000 | 91.00 +- 0.82 | - | 91.00 +- 0.82 | - | - | 1.00 / 1.00 / - / - |" in text
    assert "| vit-demo | 1,000 | " + " | ".join(["91.00 +- 0.82"] * 5) + " | 1.00 / 1.00 / 1.00 / 1.00 |" in text
    assert os.listdir(path.parent) == ["recipes.md"] and _readme() == readme  # no temporary file left


def test_profile_depth_has_help():
    from benchmarks.profile_depth import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0


def test_recipe_table_gives_mean_and_spread_per_model_and_recipe():
    from benchmarks import recipes as bench

    results = [{"model": m, "recipe": r, "seed": s, "epochs": 30, "accuracy": a, "epoch_seconds": t,
                "parameters": 1000}
               for m, r, s, a, t in [("vit-demo", "paper", 0, 0.90, 1.0), ("vit-demo", "paper", 1, 0.94, 1.2),
                                     ("vit-demo", "mixup-smoothing", 0, 0.97, 1.4),
                                     ("vit-demo", "mixup-smoothing", 1, 0.99, 1.6)]]
    text = bench.table(results)
    assert "| vit-demo | 1,000 | 92.00 +- 2.00 | 98.00 +- 1.00 | 1.10 / 1.50 |" in text  # no distilled runs: no column
    assert "seeds 0, 1; 30 epochs" in text


def test_recipe_benchmark_trains_every_kind_of_model_for_an_epoch():
    from benchmarks import recipes as bench
    from keras_vit.recipes import recipe

    for name in bench.MODELS:
        model, size = bench.build(name, recipe("deit"))
        assert model.output_shape == (None, 10) and model.input_shape == (None, size, size, 3)
    result = bench.train_one("vit-demo", "mixup-smoothing", 0, 1)
    assert 0.0 <= result["accuracy"] <= 1.0 and result["jit_compile"] and result["parameters"] == 803_210


def test_distilled_runs_come_after_their_teachers_and_read_the_teachers_model(monkeypatch, tmp_path):
    from benchmarks import recipes as bench

    assert bench.recipes_for("vit-demo", ["paper", "deit-distill"]) == ["paper", "deit-distill:cnn",
                                                                         "deit-distill:hybrid"]
    assert bench.recipes_for("cnn", ["paper", "deit-distill"]) == ["paper", "mixup-smoothing"]
    assert bench._ordered(["vit-demo"], ["deit-distill"]) == ["cnn", "hybrid", "vit-demo"]
    monkeypatch.setattr(bench, "CACHE", str(tmp_path))
    teacher = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(), keras.layers.Dense(10)])
    os.makedirs(tmp_path / "models")
    teacher.save(bench.teacher_path("cnn", 0, 1))
    result = bench.train_one("vit-demo", "deit-distill:cnn", 0, 1)
    assert result["teacher"] == "cnn" and 0.0 <= result["teacher_accuracy"] <= 1.0
    assert result["parameters"] == 803_210 + 128 + 128 + 128 * 10 + 10  # token, position row, distillation head


def test_train_ab_times_both_models_in_turn_and_tables_the_ratio():
    from benchmarks.run import QUICK
    from benchmarks.train_ab import MODELS, measure, table

    ms = measure("tiny", QUICK["tiny"], 32, 2, rounds=1, runs=1, jit=True, progress=lambda line: None)
    assert set(ms) == {(model, kind) for model in MODELS for kind in ("train", "infer")}
    assert all(value > 0 for value in ms.values())
    lines = table({("tiny", 2, True, "float32"): ms}).splitlines()
    train = lines[2].split(" | ")
    assert train[:5] == ["| tiny", "float32", "2", "on", "train"]
    assert train[-1] == f"{ms['keras-hub', 'train'] / ms['keras_vit', 'train']:.2f}x |"


def test_train_ab_builds_both_models_under_the_precision_asked_and_restores_float32(monkeypatch):
    import keras

    from benchmarks import train_ab
    from benchmarks.run import QUICK

    built, original = [], train_ab.keras_models

    def models(*args):
        out = original(*args)
        built.extend((name, model.dtype_policy.name) for name, model in out.items())
        return out

    monkeypatch.setattr(train_ab, "keras_models", models)
    ms = train_ab.measure("tiny", QUICK["tiny"], 32, 2, rounds=1, runs=1, jit=False, progress=lambda line: None,
                          precision="mixed_bfloat16")
    assert sorted(built) == [("keras-hub", "mixed_bfloat16"), ("keras_vit", "mixed_bfloat16")]
    assert all(value > 0 for value in ms.values())
    assert keras.mixed_precision.global_policy().name == "float32"


def test_train_ab_takes_hf_into_the_same_turns_and_rates_keras_vit_against_the_fastest_other(monkeypatch):
    from benchmarks import train_ab
    from benchmarks.run import QUICK

    monkeypatch.setattr(train_ab, "TORCH_PEERS", {"torch": "HF transformers (PyTorch)"})  # eager: no compile here
    ms = train_ab.measure("tiny", QUICK["tiny"], 32, 2, rounds=1, runs=1, jit=False, progress=lambda line: None,
                          with_torch=True)
    assert set(ms) == {(model, kind) for model in (*train_ab.MODELS, "HF transformers (PyTorch)")
                       for kind in ("train", "infer")}
    assert all(value > 0 for value in ms.values())
    bf16 = train_ab.measure("tiny", QUICK["tiny"], 32, 2, rounds=1, runs=1, jit=False, progress=lambda line: None,
                            precision="mixed_bfloat16", with_torch=True)
    assert ("HF transformers (PyTorch)", "train") in bf16 and ("HF transformers (PyTorch)", "infer") not in bf16
    fake = {("keras_vit", "train"): 10.0, ("keras-hub", "train"): 12.0, ("HF", "train"): 8.0,
            ("keras_vit", "infer"): 4.0, ("keras-hub", "infer"): 5.0, ("HF", "infer"): 6.0}
    lines = train_ab.table({("Ti16", 8, False, "mixed_bfloat16"): fake}).splitlines()
    assert lines[0].endswith("| keras_vit ms | keras-hub ms | HF ms | keras_vit speed / fastest other |")
    assert lines[2] == "| Ti16 | mixed_bfloat16 | 8 | off | train | 10.0 | 12.0 | 8.0 | 0.80x |"
    assert lines[3] == "| Ti16 | mixed_bfloat16 | 8 | off | infer | 4.0 | 5.0 | 6.0 | 1.25x |"
    del fake["HF", "infer"]  # HF's inference in a bfloat16 row: not timed
    assert train_ab.table({("Ti16", 8, False, "mixed_bfloat16"): fake}).splitlines()[3] == \
        "| Ti16 | mixed_bfloat16 | 8 | off | infer | 4.0 | 5.0 | – | 1.25x |"


@pytest.mark.parametrize("argv,message", [
    (["--models", "Ti32"], "--models must be a comma list of Ti16, S16, B16. Received: 'Ti32'"),
    (["--xla", "maybe"], "--xla must be a comma list of on, off. Received: 'maybe'"),
    (["--rounds", "0"], "--batch, --rounds and --runs must be >= 1. Received: 8, 0, 3"),
    (["--precision", "float16"], "--precision must be a comma list of float32, mixed_bfloat16. Received: 'float16'"),
])
def test_train_ab_refuses_bad_flags_by_name(argv, message, capsys):
    from benchmarks.train_ab import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_an_artifact_row_names_its_precision_and_claims_no_float32_share_for_int8():
    from benchmarks.run import _latency_row

    peaks = {"float32": 100.0, "bfloat16": 400.0}
    rows = {q: _latency_row(f"TFLite {q}", "Ti16", 2, lambda: None, 3, 1, 1e9, peaks, precision=q)
            for q in ("float32", "float16", "int8")}
    assert [row["precision"] for row in rows.values()] == ["float32", "float16", "int8"]
    for q in ("float32", "float16"):  # GFLOP/s (images/s x 1 GFLOP) against the float32 peak
        assert rows[q]["fraction_of_peak"] == pytest.approx(rows[q]["gflops"] / 100.0)
        assert rows[q]["latency_ms"] == pytest.approx(2000 / rows[q]["images_per_s"])
    assert rows["int8"]["fraction_of_peak"] is None and rows["int8"]["gflops"] > 0


def test_files_ab_times_the_float32_files_and_hf_in_turn_and_rates_the_fastest_file(monkeypatch):
    from benchmarks import files_ab
    from benchmarks.run import QUICK

    eager = {"torch": "HF transformers (PyTorch)"}
    monkeypatch.setattr(files_ab, "TORCH_PEERS", eager)  # no torch.compile here: its compile takes the time
    ms = files_ab.measure("tiny", QUICK["tiny"], 32, 1, rounds=1, runs=1, progress=lambda line: None)
    assert set(ms) == {*files_ab.FILES, *eager.values()} and all(value > 0 for value in ms.values())
    fake = {files_ab.FILES[0]: 5.0, files_ab.FILES[1]: 8.0, "HF transformers (PyTorch)": 10.0}
    lines = files_ab.table({("Ti16", 1): fake}).splitlines()
    assert lines[2] == "| Ti16 | 1 | 5.0 | 8.0 | 10.0 | 2.00x |"


@pytest.mark.parametrize("argv,message", [
    (["--models", "L16"], "--models must be a comma list of Ti16, S16, B16. Received: 'L16'"),
    (["--runs", "0"], "--batch, --rounds and --runs must be >= 1. Received: 1, 7, 0"),
])
def test_files_ab_refuses_bad_flags_by_name(argv, message, capsys):
    from benchmarks.files_ab import main

    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
