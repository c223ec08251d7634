"""`make test`'s runner and budget (issue 42): every module runs once, shards are packed by measured time, the
budget's guards fire, and the memory sampler sees a child process's memory."""

import glob
import json
import os
import re
import subprocess
import sys

import pytest

from tests import run_suite, suite_budget

ROOT = run_suite.ROOT


def test_the_tensorflow_pass_covers_every_test_module_and_the_docstring_examples():
    found = run_suite.units("tensorflow")
    on_disk = {os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "tests", "**", "test_*.py"), recursive=True)}
    assert set(found) == on_disk | {"keras_vit"}
    assert len(found) == len(set(found))
    assert "tests/test_run_suite.py" in found and "tests/export/test_tflite.py" in found


def test_the_backend_passes_take_the_model_side_only():
    found = run_suite.units("jax")
    assert found == run_suite.units("torch")
    assert "tests/layers/test_patches.py" in found and "tests/test_training.py" in found
    assert not any(unit.startswith("tests/export") for unit in found) and "keras_vit" not in found


def test_shards_hold_each_unit_once_longest_spread_and_unknown_modules_counted():
    seconds = {"tests/export/test_tflite.py": 400.0, "tests/test_demo.py": 200.0, "tests/test_demo_export.py": 100.0,
               "tests/test_demo_browser.py": 50.0, "tests/test_data.py": 100.0,
               "keras_vit/layers/patches.py": 2.0, "keras_vit/models/vit.py": 3.0}
    packed = run_suite.shards("tensorflow", seconds, target=240.0)
    units = [u for _, us in packed for u in us]
    assert sorted(units) == sorted(run_suite.units("tensorflow"))
    by_unit = {u: i for i, (_, us) in enumerate(packed) for u in us}
    assert by_unit["tests/export/test_tflite.py"] != by_unit["tests/test_demo.py"]  # the two longest apart
    (group,) = run_suite.TOGETHER  # the demo's modules share one process (its training, made once)
    assert by_unit["tests/test_demo.py"] == by_unit["tests/test_demo_export.py"] == by_unit["tests/test_demo_browser.py"]
    assert set(group) <= set(units)
    unknown = len(run_suite.units("tensorflow")) - 6  # all but the five timed modules and keras_vit
    total = 400.0 + 350.0 + 100.0 + 5.0 + unknown * run_suite.UNKNOWN_SECONDS
    assert sum(s for s, _ in packed) == pytest.approx(total)
    assert len(packed) == round(total / 240.0)
    for _, shard_units in packed:  # collection order inside a shard
        order = run_suite.units("tensorflow")
        assert shard_units == sorted(shard_units, key=order.index)


def test_module_seconds_file_names_real_modules_of_each_pass():
    seconds = run_suite.module_seconds()
    assert set(seconds) == set(run_suite.PASSES)
    for pass_name, modules in seconds.items():
        files = {m.split("::")[0] for m in modules}
        assert all(os.path.exists(os.path.join(ROOT, f)) for f in files if not f.startswith("keras_vit")), pass_name
        assert all(s >= 0 for s in modules.values())


def _write(directory, name, modules):
    with open(os.path.join(directory, f"{name}.json"), "w") as f:
        json.dump({"modules": modules}, f)


def test_the_budget_names_a_slow_module_and_a_peak_over_12_gb(tmp_path, capsys):
    figures = {"seconds": 10.0, "tests": 3, "rss_after_bytes": 2 * suite_budget.GB, "children_peak_bytes": 0}
    _write(tmp_path, "tensorflow-01-of-02", {"tests/test_a.py": figures, "tests/test_b.py": dict(figures, seconds=301.0)})
    _write(tmp_path, "jax-01-of-01", {"tests/test_a.py": dict(figures, seconds=299.0)})
    suite_budget.write_run("suite", ["x"], 100.0, 11.9e9, 0, directory=tmp_path)
    breaches = suite_budget.check(["suite"], ["tensorflow-01-of-02", "jax-01-of-01"], directory=tmp_path)
    assert breaches == ["tensorflow: tests/test_b.py took 301 s > 300 s"]
    printed = capsys.readouterr().out
    assert printed.index("tests/test_b.py") < printed.index("299.0")  # slowest first
    suite_budget.write_run("suite", ["x"], 100.0, 12.1e9, 0, directory=tmp_path)
    assert suite_budget.check(["suite"], ["jax-01-of-01"], directory=tmp_path) == ["suite: peak memory 12.1 GB > 12 GB"]


def test_the_sampler_sums_the_memory_of_child_processes():
    hold = "import time; block = bytearray(300 * 1000**2); print('ready', flush=True); time.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        own = suite_budget.rss_bytes()
        with suite_budget.PeakSampler(os.getpid()) as peak:
            import time

            time.sleep(3 * suite_budget.SAMPLE_SECONDS)
        assert suite_budget.rss_bytes(child.pid) >= 300 * 1000**2
        assert peak.bytes >= own + 300 * 1000**2
    finally:
        child.kill()
        child.wait()


def test_the_plugin_writes_each_module_seconds_and_tests(tmp_path):
    (tmp_path / "test_one.py").write_text("import time\n\ndef test_a():\n    time.sleep(0.3)\n\ndef test_b():\n    pass\n")
    (tmp_path / "test_two.py").write_text("import pytest\n\n@pytest.mark.skip\ndef test_c():\n    pass\n")
    (tmp_path / "conftest.py").write_text("from tests import suite_budget\n\n"
                                          "def pytest_configure(config):\n    suite_budget.pytest_configure(config)\n")
    env = dict(os.environ, KERAS_BUDGET_NAME="plugin-check", KERAS_BUDGET_DIR=str(tmp_path / "out"),
               PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path),
                          str(tmp_path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads((tmp_path / "out" / "plugin-check.json").read_text())
    modules = result["modules"]
    assert set(modules) == {"test_one.py", "test_two.py"}
    assert modules["test_one.py"]["tests"] == 2 and modules["test_two.py"]["tests"] == 1
    assert 0.3 <= modules["test_one.py"]["seconds"] < 30
    assert modules["test_one.py"]["rss_after_bytes"] > 10 * 1000**2
    assert result["slowest_tests"][0]["test"] == "test_one.py::test_a"


def test_assertions_are_counted_in_the_source(tmp_path):
    (tmp_path / "tests" / "sub").mkdir(parents=True)
    (tmp_path / "tests" / "test_x.py").write_text(
        "import pytest\n\ndef test_a():\n    assert 1\n    assert 2, 'm'\n    with pytest.raises(ValueError):\n"
        "        int('x')\n")
    (tmp_path / "tests" / "sub" / "helper.py").write_text("def f(x):\n    assert x\n    pytest.warns(UserWarning)\n")
    (tmp_path / "tests" / "notes.txt").write_text("assert 1\n")
    assert suite_budget.assertion_count(tmp_path) == 5
    assert suite_budget.assertion_count() >= 2109  # issue 42: at least the checks of the suite before it


def test_bad_arguments_exit_2_naming_the_flag(capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_suite.main(["--passes", "tensorflow,mxnet"])
    assert exit_info.value.code == 2
    assert "--passes takes a comma-separated list of tensorflow, jax, torch; received: 'tensorflow,mxnet'" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        run_suite.main(["--lanes", "0"])
    assert "--lanes takes a whole number of at least 1; received: 0" in capsys.readouterr().err


def _run_suite(tmp_path, *args):
    env = dict(os.environ, KERAS_BUDGET_DIR=str(tmp_path / "budget"), PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-m", "tests.run_suite", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_run_reports_counts_wall_time_peak_and_the_budget(tmp_path):
    run = _run_suite(tmp_path, "--passes", "torch", "--", "-k", "test_every_variant_has_a_pinned_count")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "[run_suite] 1 shards (torch), 2 at a time" in run.stdout
    assert re.search(r"\[run_suite\] torch-01-of-01: 1 passed, \d+ deselected in \d+ s: ok", run.stdout), run.stdout
    assert re.search(r"\[run_suite\] torch: \d+ deselected, 1 passed\n", run.stdout), run.stdout
    assert re.search(r"\[run_suite\] wall time \d+\.\d min, peak memory \d+\.\d GB", run.stdout), run.stdout
    figures = json.loads((tmp_path / "budget" / "torch-01-of-01.json").read_text())
    assert figures["modules"]["tests/models/test_variants.py"]["tests"] == 1
    assert (tmp_path / "budget" / "logs" / "torch-01-of-01.log").exists()
    suite = json.loads((tmp_path / "budget" / "suite.run.json").read_text())
    assert suite["exit_status"] == 0 and suite["peak_bytes"] > 100 * 1000**2  # a Keras process at least
    # a filter that leaves a shard nothing is not a failure
    run = _run_suite(tmp_path, "--passes", "torch", "--", "-k", "no_test_is_named_like_this")
    assert run.returncode == 0 and re.search(r"torch-01-of-01: \d+ deselected in \d+ s: ok", run.stdout), run.stdout[-3000:]
