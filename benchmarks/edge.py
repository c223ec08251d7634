"""Edge table: every TFLite and ONNX mode of ViT-Ti/16 and ViT-S/16 at 224 px, batch 1, on 1 and 2 threads.

    .venv/bin/python -m benchmarks.edge                      # Ti16 and S16, every mode (~20 min on 2 cores)
    .venv/bin/python -m benchmarks.edge --models Ti16 --modes int8,dynamic_int8
    .venv/bin/python -m benchmarks.edge --quick              # a tiny model at 32 px: a smoke run of a minute

`--update-results` (a full run) writes the table to benchmarks/results/edge.md, the current results that
benchmarks/README.md links to; `--output benchmarks/results/edge.json` puts the raw figures beside it (`make bench`
passes both).

Issue 11, item 6. The modes come from the export package: `export.tflite.QUANTIZATIONS` for TFLite and
`export.onnx.QUANTIZATIONS` or `export.onnx_quantization.ONNX_QUANTIZATIONS` (when `export_onnx` takes
`quantization=`; else float32 only) for ONNX. A
mode the issue asks for that the package does not offer yet, or that fails to export, is skipped with
a note. Files are made by the export functions from one float32 `ServingGraph` per model (the
TFLite files from its batch-1 twin), with `verify=False`: agreement is measured here on more inputs.

Per file:
- latency: LiteRT (`ai_edge_litert`, XNNPACK, `num_threads`) or onnxruntime (`intra_op_num_threads`,
  sequential), batch 1, on 1 and 2 threads. The files are timed in alternation, `--rounds` times, so
  that the machine's load falls on all alike; a figure is the median over rounds of the median of
  `--runs` calls. Ratio to float32 is that of the same format in the same run; speed-up is 1 thread
  over 2 threads.
- size: bytes on disk, and the ratio to the same format's float32 file.
- top-1 agreement with the Keras model (its float32 twin, through the same serving function) on
  `--samples` inputs, run on 2 threads: raw, and `export.tolerances.compare`'s
  decisive_top1_agreement (flips where Keras' margin is under 1% of its top score not counted).
  `--weights trained` (default): no pretrained weights can be downloaded here, so each model is
  trained on scikit-learn's digits (`trained`: 20 epochs at 64 px, then `keras_vit.resize` to 224 px and
  4 epochs there, the paper's low-then-high resolution recipe with the project's `compile_model`;
  cached under runs/edge_models/ by model, schedule and seed); the inputs are the first
  `--samples` of the 360 held-out digits, calibration uses the training digits (as export's
  `--calibration-data digits`), and each file's held-out accuracy is recorded too.
  `--weights random`: random init, whose zero-initialised head gives every logit 0, so the head is
  replaced by a seeded one (`decisive_head`): a normal kernel, centred on the inputs' mean feature
  and scaled so that the logits' spread over the inputs is `HEAD_SPREAD`; inputs are seeded smooth
  random fields. A far harsher judge than any trained model (benchmarks/findings/edge-table-int8.md).
- off XNNPACK: ops of the file that LiteRT's XNNPACK delegate leaves to builtin kernels
  (`export.profile.tflite_profile`), and float ops in a quantised graph.

The issue's bars (ViT-Ti/16, 1 thread) are checked under the table, met or not, with the figure.
Nothing here asserts a time.
"""

import argparse
import inspect
import json
import os
import sys
import tempfile
import time

import numpy as np

# the table's models, their training and inputs (benchmarks/edge_models.py)
from export.fast_path import fast_path
from benchmarks.edge_bars import bars, judge_bars
from benchmarks.edge_merge import check_merge, merge
from benchmarks.machine import machine
from benchmarks.timing import interleaved_ms
from benchmarks.edge_models import CACHE_DIR, MODELS, QUICK_MODEL, build, decisive_head, digits_inputs, inputs, trained

FORMATS = ("tflite", "onnx")
# What issue 11 asks the table to cover; a mode here that the export package lacks is a note, not a row. Issue 11's
# full-integer int8 is now `full_integer_int8` (the NPU file); `int8` is issue 45's phone-CPU file: both are rows.
ISSUE_MODES = {
    "tflite": ("float32", "float16", "dynamic_int8", "int8", "full_integer_int8", "int16x8", "weight_only_int8",
               "weight_only_int4"),
    "onnx": ("float32", "dynamic_int8", "int8"),
}
WEIGHTS = ("trained", "random")
CALIBRATION_SAMPLES = 200  # export.images.DEFAULT_CALIBRATION_STEPS: what `--calibration-data digits` takes
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS_TABLE = os.path.join(HERE, "results", "edge.md")  # the current table (--update-results), beside edge.json


def available_modes():
    """`{"tflite": modes, "onnx": modes}` offered by the installed export package, float32 first."""
    from export import onnx as export_onnx_module
    from export import tflite as export_tflite_module

    onnx_modes = getattr(export_onnx_module, "QUANTIZATIONS", None)
    if onnx_modes is None:
        try:
            from export.onnx_quantization import ONNX_QUANTIZATIONS as onnx_modes
        except ImportError:
            onnx_modes = None
    if onnx_modes is None or "quantization" not in inspect.signature(export_onnx_module.export_onnx).parameters:
        onnx_modes = ("float32",)
    out = {"tflite": tuple(export_tflite_module.QUANTIZATIONS), "onnx": tuple(onnx_modes)}
    return {fmt: ("float32",) + tuple(m for m in modes if m != "float32") for fmt, modes in out.items()}


def plan(wanted=None):
    """The (format, mode) pairs to measure and notes on the issue's modes that are left out.

    Args:
        wanted: None (every available mode), or a list of "mode" (in every format that has it) or
            "format:mode" strings. float32 of each format is always measured (the ratios' base).

    Returns:
        (pairs, notes): pairs is a list of (format, mode); notes a list of strings.

    Raises:
        ValueError: a wanted entry names an unknown format, or a mode neither the package nor the issue
            knows (the message lists the choices).
    """
    modes = available_modes()
    notes = [f"{fmt} {mode}: not offered by the export package yet (export.{fmt}); skipped"
             for fmt in FORMATS for mode in ISSUE_MODES[fmt] if mode not in modes[fmt]]
    if wanted is None:
        return [(fmt, mode) for fmt in FORMATS for mode in modes[fmt]], notes
    chosen = set()
    known = {m for fmt in FORMATS for m in modes[fmt] + ISSUE_MODES[fmt]}
    for entry in wanted:
        fmt, _, mode = entry.rpartition(":")
        if fmt and fmt not in FORMATS:
            raise ValueError(f"--modes: unknown format {fmt!r} (choose from {', '.join(FORMATS)}). Received: {entry!r}")
        if mode not in known:
            raise ValueError(f"--modes: unknown mode {mode!r} (choose from {', '.join(sorted(known))}). "
                             f"Received: {entry!r}")
        chosen.update((f, mode) for f in ([fmt] if fmt else FORMATS))
    pairs = [(fmt, mode) for fmt in FORMATS for mode in modes[fmt] if mode == "float32" or (fmt, mode) in chosen]
    missing = sorted((fmt, mode) for fmt, mode in chosen if mode not in modes[fmt] and mode in ISSUE_MODES[fmt])
    notes = [f"{fmt} {mode}: not offered by the export package yet (export.{fmt}); skipped" for fmt, mode in missing]
    return pairs, notes


def _export_kwargs(function, **candidates):
    """The keyword arguments `function` accepts, of `candidates`."""
    accepted = inspect.signature(function).parameters
    return {k: v for k, v in candidates.items() if k in accepted}


def export_files(model, folder, pairs, calibration, images, progress=print):
    """Writes each (format, mode) file with the export functions from one serving graph.

    Returns `(files, notes, reference)`: files `{(format, mode): {"path", "export_s"}}`; a mode whose export
    raises is left out with a note naming the error's first line; reference: what the serving graph
    outputs for `images` (the float32 twin, probabilities), float32 `(n, classes)`.
    """
    from export import export_onnx, export_tflite
    from export.signature import ServingGraph, prepare

    files, notes = {}, []
    with ServingGraph(model) as graph:
        tflite_graph, owned = prepare(graph, batch_size=1)
        try:
            for fmt, mode in pairs:
                path = os.path.join(folder, f"{model.name}_{mode}.{fmt}")
                start = time.perf_counter()
                try:
                    if fmt == "tflite":
                        export_tflite(tflite_graph, path, quantization=mode, representative_data=calibration,
                                      overwrite=True, progress=False, verify=False)
                    else:
                        extra = {} if mode == "float32" else _export_kwargs(
                            export_onnx, quantization=mode, representative_data=calibration)
                        export_onnx(graph, path, overwrite=True, verify=False, **extra)
                except (ValueError, RuntimeError, ImportError, NotImplementedError) as e:
                    first = (str(e).strip().splitlines() or [type(e).__name__])[0]
                    notes.append(f"{fmt} {mode}: export failed, skipped ({type(e).__name__}: {first[:200]})")
                    progress(f"  {model.name} {fmt} {mode}: export failed: {first[:200]}")
                    continue
                files[(fmt, mode)] = {"path": path, "export_s": time.perf_counter() - start}
                progress(f"  {model.name} {fmt} {mode}: {os.path.getsize(path) / 1e6:.2f} MB in "
                         f"{files[(fmt, mode)]['export_s']:.0f} s")
            return files, notes, graph.predict(images)
        finally:
            if owned:
                tflite_graph.close()


def runner(fmt, path, threads):
    """A zero-argument call that runs one batch-1 seeded image through the file on `threads` threads."""
    from export.runtimes import tflite_invoke

    if fmt == "tflite":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=path, num_threads=threads)
        interpreter.allocate_tensors()
        shape = tuple(interpreter.get_input_details()[0]["shape"])
        image = np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")
        return lambda: tflite_invoke(interpreter, image), (lambda x: tflite_invoke(interpreter, x))
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    shape = [1, *session.get_inputs()[0].shape[1:]]
    image = np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")
    return lambda: session.run(None, {name: image}), (lambda x: session.run(None, {name: x})[0])


def agreement(fmt, path, images, reference, threads=2, budget_s=None, progress=print, labels=None):
    """Top-1 agreement of the file with `reference` outputs on `images`, one image at a time, on `threads` threads.

    One call is timed first; with `budget_s`, the inputs are cut to what fits in it (at least 32).
    Returns `export.tolerances.compare`'s figures plus "samples", "single_ms" and "accuracy" (the file's top-1
    accuracy on int `labels` `(n,)`, in [0, 1]; None without labels).
    """
    from export.tolerances import compare

    _, predict = runner(fmt, path, threads)
    start = time.perf_counter()
    first = predict(images[:1])
    single = time.perf_counter() - start
    n = len(images)
    if budget_s is not None and single * n > budget_s:
        n = max(32, min(n, int(budget_s / single)))
    progress(f"    one inference {1000 * single:.1f} ms; agreement on {n} inputs ({threads} threads)")
    outputs = np.concatenate([first] + [predict(images[i:i + 1]) for i in range(1, n)])
    figures = compare(reference[:n], outputs)
    accuracy = None if labels is None else float(np.mean(outputs.argmax(-1) == np.asarray(labels)[:n]))
    return {**figures, "samples": n, "single_ms": 1000 * single, "accuracy": accuracy}


def latencies(files, rounds, runs, threads=(1, 2), progress=print):
    """`{(format, mode, threads): ms}`: median over `rounds` interleaved rounds of the median of `runs` calls."""
    calls = {(fmt, mode, t): runner(fmt, spec["path"], t)[0] for (fmt, mode), spec in files.items() for t in threads}
    return interleaved_ms(calls, rounds, runs, progress)


def measure(names, pairs, samples=256, rounds=10, runs=10, calibration_samples=CALIBRATION_SAMPLES, folder=None,
            agreement_budget_s=None, progress=print, weights="trained", cache_dir=CACHE_DIR, train_steps=None):
    """The edge table's rows: one per (model, format, mode) exported, plus the notes of what was skipped.

    `weights`: "trained" (default: `trained`, trained on digits and cached in `cache_dir`; `train_steps` batches
    per epoch for tests; agreement on the first `samples` held-out digits, calibration on the training digits) or
    "random" (`build` with `decisive_head`, seeded smooth random fields as inputs and calibration).

    Returns `(rows, notes)`. A row: model, format, mode, size_bytes, size_ratio, ms_1, ms_2, ratio_1, ratio_2
    (latency / the same format's float32 latency, same run, same threads), speedup (ms_1 / ms_2),
    top1_agreement, decisive_top1_agreement, samples, single_ms, ops, off_delegate, partitions, float_ops
    (TFLite only; None for ONNX), export_s, weights, accuracy (the file's held-out digits accuracy; None with
    random weights), keras_accuracy (the Keras model's on the same inputs).

    Raises:
        ValueError: `weights` is not one of `WEIGHTS`.
    """
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}. Received: weights={weights!r}")
    folder = folder or tempfile.mkdtemp(prefix="keras_vit_edge_")
    rows, notes = [], []
    for name in names:
        t0 = time.perf_counter()
        if weights == "trained":
            model, info = trained(name, steps=train_steps, cache_dir=cache_dir, progress=progress)
            judge_accuracy = info["val_accuracy"]  # on all 360 held-out digits (the issue 27 bar)
            data, labels, calibration = digits_inputs(model.input_shape[1], samples, calibration_samples)
        else:
            model, labels, judge_accuracy = build(name), None, None
            shape = tuple(model.input_shape[1:])
            data, calibration = inputs(shape, samples, seed=1), inputs(shape, calibration_samples, seed=2)
            head = decisive_head(model, data)
            progress(f"{name}: seeded head, {head['distinct_top1']} distinct top-1 classes on {samples} inputs, "
                     f"median top-1 margin {head['median_margin']:.2f} logits")
        files, skipped, reference = export_files(model, folder, pairs, calibration, data, progress)
        keras_accuracy = None if labels is None else float(np.mean(reference.argmax(-1) == labels))
        notes += [f"{name}: {note}" for note in skipped]
        measured = {}
        for (fmt, mode), spec in files.items():
            progress(f"  {name} {fmt} {mode}:")
            measured[(fmt, mode)] = agreement(fmt, spec["path"], data, reference, budget_s=agreement_budget_s,
                                              progress=progress, labels=labels)
        ms = latencies(files, rounds, runs, progress=progress)
        for (fmt, mode), spec in files.items():
            rows.append({**_row(name, fmt, mode, spec, files, measured[(fmt, mode)], ms), "weights": weights,
                         "accuracy": measured[(fmt, mode)]["accuracy"], "keras_accuracy": keras_accuracy,
                         "judge_accuracy": judge_accuracy})
        progress(f"{name}: done in {time.perf_counter() - t0:.0f} s")
    return rows, notes


def _row(name, fmt, mode, spec, files, figures, ms):
    size = os.path.getsize(spec["path"])
    base = files.get((fmt, "float32"))
    row = {"model": name, "format": fmt, "mode": mode, "size_bytes": size,
           "size_ratio": size / os.path.getsize(base["path"]) if base else None,
           "ms_1": ms[(fmt, mode, 1)], "ms_2": ms[(fmt, mode, 2)],
           "top1_agreement": figures["top1_agreement"], "decisive_top1_agreement": figures["decisive_top1_agreement"],
           "samples": figures["samples"], "single_ms": figures["single_ms"], "export_s": spec["export_s"],
           "ops": None, "off_delegate": None, "partitions": None, "float_ops": None}
    for t in (1, 2):
        row[f"ratio_{t}"] = ms[(fmt, mode, t)] / ms[(fmt, "float32", t)] if base else None
    row["speedup"] = row["ms_1"] / row["ms_2"]
    if fmt == "tflite":
        row.update(profile_columns(spec["path"]))
    return row


def profile_columns(path):
    """`{"ops", "off_delegate", "partitions", "float_ops"}` of a .tflite file from `export.profile.tflite_profile`."""
    from export.profile import tflite_profile

    profile = tflite_profile(path, measure_latency=False)
    return {"ops": profile["num_ops"], "off_delegate": profile["num_ops"] - profile["xnnpack_ops"],
            "partitions": profile["xnnpack_partitions"], "float_ops": profile["float_ops_in_quantised_graph"]}


def peer_rows(python, folder, samples, rounds, runs, progress=print):
    """The peer rows (benchmarks/edge_peer.py run by `python`, the peer environment's interpreter), profiled here.

    Returns `(rows, notes)`; when the peer script fails, no rows and a note with its exit status and last line.
    """
    import subprocess

    output = os.path.join(folder, "peer.json")
    cmd = [python, os.path.join(HERE, "edge_peer.py"), "--folder", os.path.join(folder, "peer"), "--output", output,
           "--samples", str(samples), "--rounds", str(rounds), "--runs", str(runs)]
    progress(f"peer: {' '.join(cmd)}")
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(output):
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return [], [f"peer row (HF PyTorch ViT-Ti/16 through litert-torch): failed, exit status {proc.returncode}: "
                    f"{last[:200]}"]
    with open(output) as f:
        rows = json.load(f)
    for row in rows:
        row.update(profile_columns(row.pop("path")))
        progress(f"  peer {row['mode']}: {row['ms_1']:.2f} ms on 1 thread")
    return rows, []


def _f(value, spec):
    return "n/a" if value is None else format(value, spec)


def markdown(result):
    """The result of `run` as Markdown: the table, the bars, the notes."""
    if result.get("weights", "random") == "trained":
        accuracy = {r["model"]: r["keras_accuracy"] for r in result["rows"] if r.get("keras_accuracy") is not None}
        judge = (f"agreement on the first {result['samples']} held-out digits (2 threads) with the Keras model "
                 f"trained on digits (`benchmarks.edge.trained`: 64 px, then resized and fine-tuned at 224 px; "
                 f"its held-out accuracy on them: "
                 + ", ".join(f"{m} {a:.1%}" for m, a in accuracy.items()) + ")")
    else:
        judge = f"agreement on {result['samples']} seeded inputs (2 threads), random weights, seeded decisive head"
    lines = [f"{result['machine']}. Batch 1; latency: median of {result['rounds']} interleaved rounds of the median "
             f"of {result['runs']} calls; {judge} (`benchmarks/edge.py`)."
             + ("" if not result.get("measured") else " Run ended (per model): " + ", ".join(
                 f"{m} {t}" for m, t in result["measured"].items()) + "."), "",
             "| model | format | mode | ms, 1 thread | ms, 2 threads | x float32 (1 / 2 threads) | 2-thread speed-up "
             "| MB | x float32 size | top-1 agreement (decisive) | accuracy | ops off XNNPACK / ops (partitions) "
             "| float ops | runs fast on |",
             "|" + "---|" * 14]
    for r in result["rows"]:
        off = "n/a" if r["ops"] is None else f"{r['off_delegate']} / {r['ops']} ({r['partitions']})"
        lines.append(
            f"| {r['model']} | {r['format']} | {r['mode']} | {r['ms_1']:.2f} | {r['ms_2']:.2f} | "
            f"{_f(r['ratio_1'], '.2f')} / {_f(r['ratio_2'], '.2f')} | {r['speedup']:.2f}x | "
            f"{r['size_bytes'] / 1e6:.2f} | {_f(r['size_ratio'], '.3f')} | "
            f"{r['top1_agreement']:.1%} ({r['decisive_top1_agreement']:.1%}) | {_f(r.get('accuracy'), '.1%')} | "
            f"{off} | {_f(r['float_ops'], 'd')} | {fast_path(r['format'], r['mode'])} |")
    if any(r["model"] not in MODELS and r["model"] != QUICK_MODEL for r in result["rows"]):
        lines += ["", "Peer rows (benchmarks/edge_peer.py, in their own virtual environment and process): their "
                  "ratios are to the peer's own float32 file, their agreement is with the PyTorch model."]
    lines += ["", "Bars of issue 11 (ViT-Ti/16) and issue 27 (both judges), 1 thread, same run:", ""]
    for b in result["bars"]:
        verdict = {True: "met", False: "**not met**", None: "not measured"}[b["met"]]
        lines.append(f"- {b['bar']}: {verdict} ({b['figure']})")
    if result["notes"]:
        lines += ["", "Skipped:", ""] + [f"- {note}" for note in result["notes"]]
    return "\n".join(lines)


def run(names, wanted=None, samples=256, rounds=10, runs=10, agreement_budget_s=None, folder=None, progress=print,
        peer_python=None, weights="trained"):
    """Measures the table; returns the JSON-ready result (machine, settings, weights, rows, bars, notes).

    `peer_python`: the Python of a virtual environment with litert-torch (benchmarks/README.md); with it,
    and "Ti16" in `names`, the peer rows of benchmarks/edge_peer.py are added after the table's own.
    """
    pairs, notes = plan(wanted)
    progress(f"modes: {', '.join(f'{fmt} {mode}' for fmt, mode in pairs)}")
    folder = folder or tempfile.mkdtemp(prefix="keras_vit_edge_")
    rows, skipped = measure(names, pairs, samples, rounds, runs, folder=folder, agreement_budget_s=agreement_budget_s,
                            progress=progress, weights=weights)
    if "Ti16" in names and peer_python:
        peer, peer_notes = peer_rows(peer_python, folder, samples, rounds, runs, progress)
        rows, skipped = rows + peer, skipped + peer_notes
    elif "Ti16" in names:
        skipped.append("peer row (HF PyTorch ViT-Ti/16 through litert-torch): not run; it needs its own virtual "
                       "environment (benchmarks/README.md) given as --peer-python or KERAS_VIT_PEER_PYTHON")
    result = {"machine": machine(),
              "models": list(names), "weights": weights, "samples": samples, "rounds": rounds, "runs": runs, "rows": rows,
              "notes": notes + skipped, "measured": {name: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                                                     for name in names}}
    result["bars"] = bars(rows) + judge_bars(rows)
    return result


def results_text(result, table):
    """The current results file's text: a header naming the run's date(s) and CPU, then `table`."""
    dates = sorted({when.split(" ")[0] for when in result.get("measured", {}).values()})
    where = result["machine"].split(", TensorFlow")[0]  # architecture, CPU and its matrix units, cores
    return f"# Edge table of {', '.join(dates) or 'an unknown date'}, {where}\n\n{table}\n"


def write_results(result, table, path=None):
    """Writes `results_text` to `path` (default: benchmarks/results/edge.md, which benchmarks/README.md links to)
    through a temporary file in the same folder, then a rename."""
    from keras_vit.common.files import write_text

    return write_text(path or RESULTS_TABLE, results_text(result, table))


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.edge", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help=f"comma list of {', '.join(MODELS)} (default: all)")
    parser.add_argument("--modes", default=None,
                        help="comma list of modes (every format that has it) or format:mode, e.g. int8,onnx:float32; "
                             "float32 is always measured (default: every mode the export package offers)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model at 32 px, 32 inputs, 2 rounds of 3 calls: a smoke run")
    parser.add_argument("--weights", choices=WEIGHTS, default="trained",
                        help="trained: ViT-Ti/16 and ViT-S/16 trained on digits (cached under runs/edge_models; "
                             "agreement on held-out digits); random: random init with a seeded decisive head on "
                             "random smooth images (default: trained)")
    parser.add_argument("--samples", type=int, default=None, help="agreement inputs (default 256)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved latency rounds (default 10)")
    parser.add_argument("--runs", type=int, default=None, help="calls per round (default 10)")
    parser.add_argument("--agreement-budget", type=float, default=None,
                        help="seconds per file for the agreement; fewer inputs (at least 32) when one inference "
                             "says it would take longer (default: no limit)")
    parser.add_argument("--peer-python", default=os.environ.get("KERAS_VIT_PEER_PYTHON"),
                        help="Python of a virtual environment with litert-torch: adds the peer rows (HF PyTorch "
                             "ViT-Ti/16, benchmarks/edge_peer.py); default $KERAS_VIT_PEER_PYTHON")
    parser.add_argument("--output", default=None, help="also write the result as JSON here")
    parser.add_argument("--merge", default=None,
                        help="an earlier --output JSON (same machine and settings): the models this run does not "
                             "measure keep their rows from it, in one table (each model is timed in rounds of its own)")
    parser.add_argument("--update-results", action="store_true",
                        help="save the table as the current results in benchmarks/results/, which "
                             "benchmarks/README.md links to (full runs only)")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    def fail(message):
        parser.exit(2, f"{parser.prog}: error: {message}\n")

    for flag, value in (("samples", args.samples), ("rounds", args.rounds), ("runs", args.runs)):
        if value is not None and value < 1:
            fail(f"--{flag} must be a positive int. Received: {value}")
    if args.quick:
        if args.models:
            fail("--quick uses its own tiny model; drop --models")
        names, samples, rounds, runs = [QUICK_MODEL], args.samples or 32, args.rounds or 2, args.runs or 3
    else:
        names = [m.strip() for m in (args.models or ",".join(MODELS)).split(",") if m.strip()]
        unknown = [m for m in names if m not in MODELS]
        if unknown:
            fail(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(MODELS)}). Received: {args.models}")
        samples, rounds, runs = args.samples or 256, args.rounds or 10, args.runs or 10
    wanted = None if args.modes is None else [m.strip() for m in args.modes.split(",") if m.strip()]
    try:
        plan(wanted)
    except ValueError as e:
        fail(str(e))
    full = not args.quick and args.modes is None and args.samples in (None, 256) and args.weights == "trained"
    if args.update_results and not full:
        fail("--update-results needs a full run of trained models (no --quick, --modes, --samples or --weights random;"
             " --models Ti16 is allowed when S16 does not fit in the time)")
    if args.peer_python and not os.path.isfile(args.peer_python):
        fail(f"--peer-python must be a Python executable. Received: {args.peer_python}")
    earlier = None
    if args.merge:
        try:
            with open(args.merge) as f:
                earlier = json.load(f)
        except (OSError, ValueError) as e:
            fail(f"--merge must be a JSON file written by --output. Received: {args.merge} ({e})")
        try:
            check_merge(earlier, {"machine": machine(), "weights": args.weights, "samples": samples, "rounds": rounds,
                                  "runs": runs})
        except ValueError as e:
            fail(str(e))
    result = run(names, wanted, samples, rounds, runs, args.agreement_budget,
                 progress=lambda text: print(text, flush=True), peer_python=args.peer_python, weights=args.weights)
    if earlier is not None:
        try:
            result = merge(result, earlier)
        except ValueError as e:
            fail(str(e))
    table = markdown(result)
    print()
    print(table)
    if args.output:
        from keras_vit.common.files import staged

        with staged(args.output, overwrite=True) as tmp, open(tmp, "w") as f:
            json.dump(result, f, indent=1)
    if args.update_results:
        print(f"written: {write_results(result, table)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
