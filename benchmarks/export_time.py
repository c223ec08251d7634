"""Wall time of `keras-vit-export` on one model, this checkout against an earlier revision, alternating.

    .venv/bin/python -m benchmarks.export_time runs/demo/model.keras --ref 27b218e [--rounds 2]

Each round runs `python -m export MODEL --calibration-data digits` (every format and quantisation,
verification and latency included) once with the revision `--ref` (checked out with `git worktree`
into a temporary folder, run with this checkout's virtual environment) and once with this checkout,
each in a fresh process, and prints the wall times and their ratio. The model file must load in both
revisions: save it with `compile=False` if the optimizer's config changed in between.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_export(code_dir, model, out):
    """Seconds one export takes with the packages of `code_dir`; raises on a non-zero exit."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "export", os.path.abspath(model), "--calibration-data", "digits",
                             "--output-dir", out], cwd=code_dir, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        raise RuntimeError(f"export with {code_dir} exited {result.returncode}: {result.stderr[-1500:]}")
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.export_time", description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--ref", required=True, help="the earlier git revision")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="keras_vit_export_time_") as tmp:
        before = os.path.join(tmp, "ref")
        subprocess.run(["git", "worktree", "add", "--detach", before, args.ref], cwd=ROOT, check=True, capture_output=True)
        try:
            times = {"ref": [], "this": []}
            for i in range(args.rounds):
                for side, code in (("ref", before), ("this", ROOT)):
                    times[side].append(run_export(code, args.model, os.path.join(tmp, f"out-{side}-{i}")))
                    print(f"round {i + 1}: {side} {times[side][-1]:.1f} s", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", before], cwd=ROOT, capture_output=True)
    ref, this = (sum(t) / len(t) for t in (times["ref"], times["this"]))
    print(f"| revision | export wall time s (mean of {args.rounds}) |\n|---|---|\n| {args.ref} | {ref:.1f} |\n"
          f"| this checkout | {this:.1f} |\n\nratio this / ref: {this / ref:.2f}")


if __name__ == "__main__":
    main()
