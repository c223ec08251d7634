"""The test suite's budget: wall time and memory per test module, and a guard on both (issue 42).

Two parts:

* A pytest plugin (`tests/conftest.py` loads it): for every test module it sums the durations of its
  tests' setup, call and teardown, and records the resident memory of the process that ran it (the
  pytest process, or each pytest-xdist worker) after each test, and the peak of the processes that the
  module's tests started and waited for. At the end of the session it writes one JSON file,
  `runs/test-budget/<name>.json` (name: `KERAS_BUDGET_NAME`, else the Keras backend), with each module's
  seconds, test count and memory, and the 30 slowest tests.

* A command wrapper, `python -m tests.suite_budget run [--name N] -- COMMAND ...`: runs one command (a
  whole pytest pass), samples the resident memory of the command's whole process tree (the sum of every
  process's RSS from `/proc`, pytest workers and the subprocesses that tests start included) every
  `SAMPLE_SECONDS`, and prints its wall time and peak. `python -m tests.suite_budget check NAME ...`
  prints the table of the passes' figures and exits 1 when one test module took more than
  `MODULE_LIMIT_SECONDS` or a pass's peak memory went over `MEMORY_LIMIT_BYTES` (issue 42's guards).
  `make test` runs every pass through `run` and ends with `check`.

The memory figure is the sum of resident set sizes (RSS), in bytes; pages shared between processes (the
shared libraries' code) are counted once per process, so the figure errs high, never low. Linux only
(`/proc`); elsewhere the memory columns read 0 and only the times are checked.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT_DIR = os.path.join(ROOT, "runs", "test-budget")
MODULE_LIMIT_SECONDS = 300.0  # issue 42: no test module over 5 minutes on the developers' 2-core machine
MEMORY_LIMIT_BYTES = 12 * 1000**3  # issue 42: the suite's peak at most 12 GB
SAMPLE_SECONDS = 0.5
SLOWEST = 30
GB = 1000**3


def rss_bytes(pid="self"):
    """Resident memory of one process, in bytes (`/proc/<pid>/statm`); 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def tree_rss_bytes(root_pid):
    """The summed RSS of `root_pid` and all its descendants, in bytes (a walk of `/proc/*/stat` parents)."""
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: the parent pid follows the last ')'.
        fields = stat[stat.rfind(")") + 2:].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        total += rss_bytes(pid)
        stack.extend(children.get(pid, ()))
    return total


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
            "seconds": 0.0, "tests": 0, "rss_after_bytes": 0, "children_peak_bytes": 0, "worker": ""})

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
            module["worker"] = getattr(report, "node", None) and report.node.gateway.id or "main"

    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):  # an xdist worker: its controller writes the file
            return
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


def _run(name, command):
    """Runs `command`, sampling its process tree's RSS; writes `<name>.run.json`; returns its exit status."""
    start = time.time()
    process = subprocess.Popen(command)
    peak = {"bytes": 0}
    done = threading.Event()

    def sample():
        while not done.wait(SAMPLE_SECONDS):
            peak["bytes"] = max(peak["bytes"], tree_rss_bytes(process.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    status = process.wait()
    done.set()
    sampler.join()
    wall = time.time() - start
    os.makedirs(OUTPUT_DIR, exist_ok=True)
    with open(os.path.join(OUTPUT_DIR, f"{name}.run.json"), "w") as f:
        json.dump({"name": name, "command": command, "wall_seconds": wall, "peak_bytes": peak["bytes"],
                   "exit_status": status}, f, indent=1)
    print(f"[suite budget] {name}: {wall / 60:.1f} min wall, peak memory {peak['bytes'] / GB:.1f} GB "
          f"(the command's process tree, summed RSS)", flush=True)
    return status


def _check(names, modules_shown=10):
    """Prints each pass's figures and its slowest modules; returns 1 when a limit is broken, else 0."""
    failures = []
    total_wall = 0.0
    for name in names:
        try:
            with open(os.path.join(OUTPUT_DIR, f"{name}.run.json")) as f:
                run = json.load(f)
            with open(os.path.join(OUTPUT_DIR, f"{name}.json")) as f:
                modules = json.load(f)["modules"]
        except (OSError, ValueError) as error:
            failures.append(f"{name}: no figures ({error}); run the pass through `python -m tests.suite_budget run`")
            continue
        total_wall += run["wall_seconds"]
        print(f"\n{name}: {run['wall_seconds'] / 60:.1f} min, peak {run['peak_bytes'] / GB:.1f} GB, "
              f"{sum(m['tests'] for m in modules.values())} tests in {len(modules)} modules; slowest modules:")
        print(f"  {'seconds':>8}  {'tests':>5}  {'RSS after (GB)':>14}  module")
        for module, figures in list(modules.items())[:modules_shown]:
            print(f"  {figures['seconds']:8.1f}  {figures['tests']:5d}  {figures['rss_after_bytes'] / GB:14.1f}  {module}")
        if run["peak_bytes"] > MEMORY_LIMIT_BYTES:
            failures.append(f"{name}: peak memory {run['peak_bytes'] / GB:.1f} GB > {MEMORY_LIMIT_BYTES / GB:.0f} GB")
        for module, figures in modules.items():
            if figures["seconds"] > MODULE_LIMIT_SECONDS:
                failures.append(f"{name}: {module} took {figures['seconds']:.0f} s > {MODULE_LIMIT_SECONDS:.0f} s")
    print(f"\n[suite budget] all passes: {total_wall / 60:.1f} min of test time")
    for failure in failures:
        print(f"[suite budget] over the budget: {failure}", file=sys.stderr)
    return 1 if failures else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tests.suite_budget", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="what", required=True)
    run = commands.add_parser("run", help="run one pass (a command) and record its wall time and peak memory")
    run.add_argument("--name", required=True, help="the pass's name (also KERAS_BUDGET_NAME for its pytest)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ARGS...")
    check = commands.add_parser("check", help="print the passes' figures; exit 1 over the budget")
    check.add_argument("names", nargs="+")
    args = parser.parse_args(argv)
    if args.what == "run":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not command:
            parser.error("run: give the command after --, e.g. run --name tensorflow -- python -m pytest")
        os.environ["KERAS_BUDGET_NAME"] = args.name
        return _run(args.name, command)
    return _check(args.names)


if __name__ == "__main__":
    sys.exit(main())
