"""The test suite's budget: wall time and memory per test module, and a guard on both (issue 42).

Two parts:

* A pytest plugin (`tests/conftest.py` loads it): for every test module it sums the durations of its
  tests' setup, call and teardown, and records the resident memory of the pytest process after each
  test, and the peak of the processes that its tests started and waited for. At the end of the session
  it writes `runs/test-budget/<name>.json` (name: `KERAS_BUDGET_NAME`, else the Keras backend; folder:
  `KERAS_BUDGET_DIR`, else `runs/test-budget`): each module's seconds, test count and memory, and the 30
  slowest tests. (A plain `python -m pytest` writes it too.)

* The guard that `make test` (`tests/run_suite.py`) ends with: `PeakSampler` samples the resident memory
  of the run's whole process tree (the sum of every process's RSS: the pytest processes and
  the subprocesses their tests start) every `SAMPLE_SECONDS`, and `check` prints the slowest modules and
  names each breach of issue 42's budget: a test module over `MODULE_LIMIT_SECONDS`, or a peak over
  `MEMORY_LIMIT_BYTES`.

The memory figure is the sum of resident set sizes (RSS), in bytes; pages shared between processes (the
shared libraries' code) are counted once per process, so the figure errs high, never low.
"""

import ast
import json
import os
import resource
import sys
import threading
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT_DIR = os.environ.get("KERAS_BUDGET_DIR") or os.path.join(ROOT, "runs", "test-budget")
MODULE_LIMIT_SECONDS = 300.0  # issue 42: no test module over 5 minutes on the developers' 2-core machine
MEMORY_LIMIT_BYTES = 12 * 1000**3  # issue 42: the suite's peak at most 12 GB
SAMPLE_SECONDS = 0.5
SLOWEST = 30
GB = 1000**3


def rss_bytes(pid=None):
    """Resident memory of one process (this one by default), in bytes (psutil); 0 when it has ended."""
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def tree_rss_bytes(root_pid):
    """The summed RSS of `root_pid` and all its descendants, in bytes (psutil); those that ended count 0."""
    try:
        processes = [psutil.Process(root_pid), *psutil.Process(root_pid).children(recursive=True)]
    except psutil.Error:
        return 0
    return sum(rss_bytes(process.pid) for process in processes)


def _children_peak_bytes():
    """The largest RSS any waited-for child process of this one reached (`getrusage`, KiB on Linux), in bytes."""
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024


def _module_of(nodeid):
    return nodeid.split("::", 1)[0]


class BudgetRecorder:
    """Sums each module's test durations and keeps its memory figures; writes them at the session's end."""

    def __init__(self, config):
        self.config = config
        self.modules = {}
        self.tests = {}
        self.start = time.time()

    def _module(self, nodeid):
        return self.modules.setdefault(_module_of(nodeid), {
            "seconds": 0.0, "tests": 0, "rss_after_bytes": 0, "children_peak_bytes": 0})

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "teardown":  # the memory this test's process holds after it, and its children's peak so far
            report.user_properties.append(("rss_bytes", rss_bytes()))
            report.user_properties.append(("children_peak_bytes", _children_peak_bytes()))

    def pytest_runtest_logreport(self, report):
        module = self._module(report.nodeid)
        module["seconds"] += report.duration
        self.tests[report.nodeid] = self.tests.get(report.nodeid, 0.0) + report.duration
        if report.when == "call" or (report.when == "setup" and report.skipped):
            module["tests"] += 1
        properties = dict(report.user_properties)
        if "rss_bytes" in properties:
            module["rss_after_bytes"] = max(module["rss_after_bytes"], properties["rss_bytes"])
            module["children_peak_bytes"] = max(module["children_peak_bytes"], properties["children_peak_bytes"])

    def pytest_sessionfinish(self, session):
        name = os.environ.get("KERAS_BUDGET_NAME") or os.environ.get("KERAS_BACKEND", "tensorflow")
        slowest = sorted(self.tests.items(), key=lambda item: -item[1])[:SLOWEST]
        result = {
            "name": name,
            "wall_seconds": time.time() - self.start,
            "modules": dict(sorted(self.modules.items(), key=lambda item: -item[1]["seconds"])),
            "slowest_tests": [{"test": test, "seconds": seconds} for (test, seconds) in slowest],
        }
        os.makedirs(OUTPUT_DIR, exist_ok=True)
        path = os.path.join(OUTPUT_DIR, f"{name}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(path + ".tmp", path)


def pytest_configure(config):
    config.pluginmanager.register(BudgetRecorder(config), "keras_vit_suite_budget")


class PeakSampler:
    """A context manager that samples the summed RSS of `root_pid`'s process tree every `SAMPLE_SECONDS`.

    `.bytes` is the largest sample, in bytes (0 where `/proc` cannot be read).
    """

    def __init__(self, root_pid):
        self.root_pid, self.bytes = root_pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._done.wait(SAMPLE_SECONDS):
            self.bytes = max(self.bytes, tree_rss_bytes(self.root_pid))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()
        return False


def write_run(name, command, wall_seconds, peak_bytes, exit_status, directory=OUTPUT_DIR):
    """Writes a run's wall time and peak memory to `runs/test-budget/<name>.run.json`."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"{name}.run.json"), "w") as f:
        json.dump({"name": name, "command": command, "wall_seconds": wall_seconds, "peak_bytes": peak_bytes,
                   "exit_status": exit_status}, f, indent=1)


def modules_of(shard_names, directory=OUTPUT_DIR):
    """Every module's figures over the shards' files, keyed by (pass, module); the pass is the name's first word."""
    modules = {}
    for shard in shard_names:
        try:
            with open(os.path.join(directory, f"{shard}.json")) as f:
                figures = json.load(f)["modules"]
        except (OSError, ValueError):
            continue  # a shard that died before its session ended: its own failure is reported
        for module, values in figures.items():
            modules[(shard.split("-")[0], module)] = dict(values, shard=shard)
    return modules


def check(run_names, shard_names, shown=12, directory=OUTPUT_DIR):
    """Prints the slowest modules and each run's peak; returns the budget's breaches (empty when it held).

    A breach is a module whose tests took more than `MODULE_LIMIT_SECONDS` in all, or a run whose process
    tree's peak went over `MEMORY_LIMIT_BYTES`.
    """
    breaches = []
    modules = modules_of(shard_names, directory)
    slowest = sorted(modules.items(), key=lambda item: -item[1]["seconds"])
    print(f"\n[suite budget] the {min(shown, len(slowest))} slowest of {len(modules)} modules:")
    print(f"  {'seconds':>8}  {'tests':>5}  {'RSS after (GB)':>14}  pass        module")
    for (pass_name, module), figures in slowest[:shown]:
        print(f"  {figures['seconds']:8.1f}  {figures['tests']:5d}  {figures['rss_after_bytes'] / GB:14.1f}  "
              f"{pass_name:<10}  {module}")
    for (pass_name, module), figures in slowest:
        if figures["seconds"] > MODULE_LIMIT_SECONDS:
            breaches.append(f"{pass_name}: {module} took {figures['seconds']:.0f} s > {MODULE_LIMIT_SECONDS:.0f} s")
    for name in run_names:
        with open(os.path.join(directory, f"{name}.run.json")) as f:
            peak = json.load(f)["peak_bytes"]
        if peak > MEMORY_LIMIT_BYTES:
            breaches.append(f"{name}: peak memory {peak / GB:.1f} GB > {MEMORY_LIMIT_BYTES / GB:.0f} GB")
    for breach in breaches:
        print(f"[suite budget] over the budget: {breach}", file=sys.stderr)
    return breaches


def assertion_count(root=ROOT):
    """The checks written in the tests: `assert` statements plus `pytest.raises` / `pytest.warns` calls.

    Counted in the source (`ast`) of every `.py` file under `tests/`, so that a change that moves or merges
    tests can show it kept every check (issue 42's bar: the same number of assertions or more).
    """
    count = 0
    for folder, _, files in os.walk(os.path.join(root, "tests")):
        for name in files:
            if not name.endswith(".py"):
                continue
            with open(os.path.join(folder, name)) as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.Assert):
                    count += 1
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in ("raises", "warns") and getattr(node.func.value, "id", "") == "pytest"):
                    count += 1
    return count
