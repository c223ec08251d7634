"""`make test`: the whole suite in shards of test modules, two at a time, each in a fresh process (issue 42).

One pytest process that ran all 1,200 tests grew to 18-19 GB and took 47-52 minutes on a 2-core machine:
TensorFlow keeps what each test compiles and converts (XLA programs, converter state) for the life of the
process, and most of a test's time is single-threaded (tracing, converting, importing in a subprocess). So:

* The TensorFlow pass's test modules (`setup.cfg`'s testpaths: every `test_*.py` under `tests/`, and
  `keras_vit/` for the docstrings' examples) are packed into shards of about `SHARD_SECONDS` of measured
  work each (`tests/module_seconds.json`, longest first); the JAX and PyTorch passes (the model side's
  tests, `BACKEND_TESTS`) are shards of their own, with `KERAS_BACKEND` set.
* `LANES` shards run at a time, longest first, each a plain `python -m pytest` in a new process, which
  frees its memory when it ends. Every test runs exactly as under one `python -m pytest`: the same
  conftest, markers, fixtures and assertions; only the process boundaries move.
* The models that tests of several shards need are made once per run (`tests/shared_cache.py`, in a new
  temporary folder, removed at the end).
* Each shard's output goes to `runs/test-budget/logs/<shard>.log`; a line per finished shard says its
  counts, and a failing shard's summary is printed. At the end: the counts of every pass, the wall time,
  the peak memory of the whole process tree (`tests.suite_budget`), and the budget check (no module over
  5 minutes, the peak at most 12 GB), which names every breach.

Usage: `python -m tests.run_suite [--lanes N] [--passes tensorflow,jax,torch] [--enforce-budget]
[-- PYTEST ARGS]`, e.g. `python -m tests.run_suite -- -m "not slow"`. The exit status is 0 only when every
shard passed, and with `--enforce-budget` only when the budget held too. `make test` prints a breach;
`make test-budget` enforces it (times depend on the machine: docs/testing.md).
`python -m tests.run_suite --save-seconds` writes the last run's per-module seconds into
`tests/module_seconds.json` (the packing's input; a module without a figure counts `UNKNOWN_SECONDS`).
"""

import argparse
import configparser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from tests import shared_cache, suite_budget

ROOT = suite_budget.ROOT
SECONDS_FILE = os.path.join(ROOT, "tests", "module_seconds.json")
LOG_DIR = os.path.join(suite_budget.OUTPUT_DIR, "logs")
LANES = 2  # the developers' machine and CI have 2 cores
SHARD_SECONDS = 240.0  # measured work per shard, one process each: bounds a process's growth
UNKNOWN_SECONDS = 30.0
# Issue 15: the model side's tests, run again under JAX and PyTorch (tests of TensorFlow itself are marked
# tensorflow_only and skipped there).
BACKEND_TESTS = ("tests/layers", "tests/models", "tests/weights", "tests/test_inspect.py", "tests/test_resize.py",
                 "tests/test_training.py", "tests/test_channels_first.py", "tests/test_preprocessing.py",
                 "tests/test_losses.py", "tests/test_distillation.py")
PASSES = ("tensorflow", "jax", "torch")
NO_TESTS_COLLECTED = 5  # pytest's exit status when a shard's filters select no test
# Modules that share a model made once per run (tests/shared_cache.py) and read it one after another: packed into one
# shard, so that no lane waits on another's lock. The demo's training is made by the first, read by the others.
TOGETHER = (("tests/test_demo.py", "tests/test_demo_export.py", "tests/test_demo_browser.py"),)
SUMMARY = re.compile(r"^=+ (.*(?:passed|failed|error|skipped|deselected|no tests ran).*) in [\d.]+s.*=+$", re.M)


def _testpaths():
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "setup.cfg"))
    return config["tool:pytest"]["testpaths"].split()


def _test_files(path):
    """The test modules pytest collects under `path` (a file, or a folder's `test_*.py` / `*_test.py`)."""
    full = os.path.join(ROOT, path)
    if os.path.isfile(full):
        return [path]
    found = []
    for folder, folders, files in os.walk(full):
        folders[:] = sorted(f for f in folders if not f.startswith((".", "__")) and f != "node_modules")
        found += [os.path.relpath(os.path.join(folder, f), ROOT) for f in sorted(files)
                  if f.endswith(".py") and (f.startswith("test_") or f.endswith("_test.py"))]
    return found


def units(pass_name):
    """The units a pass packs into shards: test modules, and a folder without any (docstring examples) whole."""
    paths = _testpaths() if pass_name == "tensorflow" else BACKEND_TESTS
    found = []
    for path in paths:
        found += _test_files(path) or [path]
    return found


def module_seconds():
    """Measured seconds per pass and module (`tests/module_seconds.json`); {} when the file is missing."""
    try:
        with open(SECONDS_FILE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _unit_seconds(unit, seconds):
    """A unit's measured seconds: its own figure, or the sum of the modules under it (a folder)."""
    if unit in seconds:
        return seconds[unit]
    inside = [s for module, s in seconds.items() if module.startswith(unit.rstrip("/") + "/")]
    return sum(inside) if inside else UNKNOWN_SECONDS


def shards(pass_name, seconds, target=SHARD_SECONDS):
    """Packs a pass's units into shards of about `target` seconds (longest first, each into the lightest shard).

    A `TOGETHER` group goes into one shard as one item. Returns a list of (estimated seconds, [units]), each
    shard's units in collection order; an item longer than `target` is a shard by itself.
    """
    order = units(pass_name)
    items = [[u for u in group if u in order] for group in TOGETHER]
    items = [group for group in items if group]
    grouped = {u for group in items for u in group}
    items += [[u] for u in order if u not in grouped]
    timed = sorted(((sum(_unit_seconds(u, seconds) for u in item), item) for item in items), key=lambda t: -t[0])
    total = sum(s for s, _ in timed)
    count = max(1, round(total / target))
    packed = [[0.0, []] for _ in range(count)]
    for item_seconds, item in timed:
        lightest = min(packed, key=lambda shard: shard[0])
        lightest[0] += item_seconds
        lightest[1] += item
    return [(s, sorted(us, key=order.index)) for s, us in packed if us]


class Shard:
    def __init__(self, pass_name, index, count, estimate, paths):
        self.pass_name, self.estimate, self.paths = pass_name, estimate, paths
        self.name = f"{pass_name}-{index + 1:02d}-of-{count:02d}"
        self.status, self.summary, self.seconds = None, "", 0.0

    def run(self, pytest_args, print_lock):
        env = dict(os.environ, KERAS_BUDGET_NAME=self.name)
        if self.pass_name != "tensorflow":
            env["KERAS_BACKEND"] = self.pass_name
        else:
            env.pop("KERAS_BACKEND", None)
        log_path = os.path.join(LOG_DIR, f"{self.name}.log")
        start = time.time()
        with open(log_path, "w") as log:
            self.status = subprocess.call([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *pytest_args,
                                           *self.paths], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.seconds = time.time() - start
        if self.status == NO_TESTS_COLLECTED:  # a -m or -k filter left this shard nothing: not a failure
            self.status = 0
        with open(log_path, errors="replace") as f:
            output = f.read()
        found = SUMMARY.findall(output)
        self.summary = found[-1] if found else "no pytest summary (see the log)"
        with print_lock:
            mark = "ok" if self.status == 0 else f"FAILED (exit {self.status})"
            print(f"[run_suite] {self.name}: {self.summary} in {self.seconds:.0f} s: {mark}", flush=True)
            if self.status != 0:
                tail = output[output.find("= FAILURES ="):] if "= FAILURES =" in output else output
                print(tail[-12000:], flush=True)
                print(f"[run_suite] the whole output: {log_path}", flush=True)
        return self


def _counts(summaries):
    totals = {}
    for summary in summaries:
        for count, word in re.findall(r"(\d+) (\w+)", summary):
            totals[word] = totals.get(word, 0) + int(count)
    return ", ".join(f"{n} {w}" for w, n in sorted(totals.items())) or "nothing ran"


def run(passes, pytest_args, lanes=LANES, enforce_budget=False):
    """Runs the passes' shards `lanes` at a time; prints the counts and the budget; returns the exit status."""
    seconds = module_seconds()
    planned = []
    for pass_name in passes:
        packed = shards(pass_name, seconds.get(pass_name, {}))
        planned += [Shard(pass_name, i, len(packed), s, paths) for i, (s, paths) in enumerate(packed)]
    planned.sort(key=lambda shard: -shard.estimate)  # longest first: the last lane to finish waits least
    os.makedirs(LOG_DIR, exist_ok=True)
    for stale in os.listdir(suite_budget.OUTPUT_DIR):
        if stale.endswith(".json"):
            os.remove(os.path.join(suite_budget.OUTPUT_DIR, stale))
    print(f"[run_suite] {len(planned)} shards ({', '.join(passes)}), {lanes} at a time, logs in "
          f"{os.path.relpath(LOG_DIR, ROOT)}/", flush=True)
    lock = threading.Lock()
    start = time.time()
    cache = tempfile.mkdtemp(prefix="keras_vit_test_cache_")  # this run's shared models (tests/shared_cache.py)
    os.environ[shared_cache.CACHE_VARIABLE] = cache
    try:
        with suite_budget.PeakSampler(os.getpid()) as peak, ThreadPoolExecutor(lanes) as pool:
            done = list(pool.map(lambda shard: shard.run(pytest_args, lock), planned))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    wall = time.time() - start
    failed = [shard.name for shard in done if shard.status != 0]
    for pass_name in passes:
        print(f"[run_suite] {pass_name}: {_counts(s.summary for s in done if s.pass_name == pass_name)}")
    suite_budget.write_run("suite", [sys.executable, "-m", "tests.run_suite", *pytest_args], wall, peak.bytes,
                           1 if failed else 0)
    budget = suite_budget.check(["suite"], [shard.name for shard in done])
    print(f"[run_suite] wall time {wall / 60:.1f} min, peak memory {peak.bytes / suite_budget.GB:.1f} GB "
          f"(every process of the run, summed RSS)", flush=True)
    if failed:
        print(f"[run_suite] failed shards: {', '.join(failed)}", file=sys.stderr)
    if budget and not enforce_budget:
        print("[run_suite] the budget was broken (above); --enforce-budget makes that exit 1", file=sys.stderr)
    return 1 if failed or (budget and enforce_budget) else 0


def save_seconds():
    """Writes the last run's seconds per pass and module into `tests/module_seconds.json`."""
    measured = {}
    for name in sorted(os.listdir(suite_budget.OUTPUT_DIR)):
        match = re.match(r"(\w+)-\d+-of-\d+\.json$", name)
        if not match:
            continue
        with open(os.path.join(suite_budget.OUTPUT_DIR, name)) as f:
            for module, figures in json.load(f)["modules"].items():
                measured.setdefault(match.group(1), {})[module] = round(figures["seconds"], 1)
    if not measured:
        print("[run_suite] no shard figures under runs/test-budget/: run the suite first", file=sys.stderr)
        return 1
    with open(SECONDS_FILE + ".tmp", "w") as f:
        json.dump({p: dict(sorted(m.items())) for p, m in sorted(measured.items())}, f, indent=1)
        f.write("\n")
    os.replace(SECONDS_FILE + ".tmp", SECONDS_FILE)
    print(f"[run_suite] wrote {os.path.relpath(SECONDS_FILE, ROOT)}: {sum(map(len, measured.values()))} modules")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.run_suite", description=__doc__.split("\n")[0])
    parser.add_argument("--lanes", type=int, default=LANES, help=f"shards at a time (default {LANES})")
    parser.add_argument("--passes", default=",".join(PASSES),
                        help=f"comma-separated, of {', '.join(PASSES)} (default: all three)")
    parser.add_argument("--enforce-budget", action="store_true",
                        help="exit 1 when a module took over 5 minutes or the peak went over 12 GB (default: say so)")
    parser.add_argument("--save-seconds", action="store_true",
                        help="write the last run's per-module seconds into tests/module_seconds.json and exit")
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="-- then arguments for every pytest")
    args = parser.parse_args(argv)
    if args.save_seconds:
        return save_seconds()
    passes = [p.strip() for p in args.passes.split(",") if p.strip()]
    unknown = [p for p in passes if p not in PASSES]
    if unknown or not passes:
        parser.error(f"--passes takes a comma-separated list of {', '.join(PASSES)}; received: {args.passes!r}")
    if args.lanes < 1:
        parser.error(f"--lanes takes a whole number of at least 1; received: {args.lanes}")
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    return run(passes, pytest_args, args.lanes, args.enforce_budget)


if __name__ == "__main__":
    sys.exit(main())
