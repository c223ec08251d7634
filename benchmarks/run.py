"""keras_vit benchmarks: training and inference throughput against peers and against this machine's peak.

    make bench                                   # everything (tens of minutes on 2 cores)
    .venv/bin/python -m benchmarks.run --models Ti16 --sections train
    .venv/bin/python -m benchmarks.run --quick   # a tiny model, two jobs at a time: checks that it all runs
    .venv/bin/python -m benchmarks.run --sections edge   # the edge table only (benchmarks/edge.py)

Prints Markdown tables and writes them as `latest.json` and `latest.md`: to runs/bench/ (or `--output-dir`),
or, with `--update-results` (a full run only), to benchmarks/results/ as the current results, which
benchmarks/README.md links to (the edge table's child then writes benchmarks/results/edge.md). A run in
which a figure failed writes incomplete.json/.md instead and exits 1. Times are medians over timed steps
after warm-up steps (XLA compilation excluded). Nothing here asserts a time.

Figures per row: images/s; achieved GFLOP/s from the analytic FLOP count of the model (forward
2 x MACs per image; training counted as 3x forward); and that as a fraction of the matrix-multiply
peak measured in the row's own process (the best float32 and bfloat16 matrix product of TensorFlow with
and without XLA and of PyTorch; the peak of the row's compute dtype). Peers, same configuration, same
run: keras-hub's `ViTBackbone` (+ token pooling and a Dense head, Keras 3 on TensorFlow) and Hugging
Face transformers' `ViTForImageClassification` in PyTorch, eager and under `torch.compile` (bfloat16
through `torch.autocast`); and keras_vit itself on Keras' JAX and PyTorch backends (`benchmarks.peers`).
After the tables of rows: the fastest exported float32 file against the fastest PyTorch peer.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from benchmarks.machine import cpu
from benchmarks.peers import BACKENDS, backend_env, infer_backend, infer_torch, keras_hub_model, train_torch
from benchmarks.throughput_tables import (
    TORCH_PEERS, one_line, best_settings, files_against_torch, headline, markdown)
from benchmarks.timing import median_seconds, wall_times

SIZES = {"Ti16": (192, 12, 3, 768, 16), "S16": (384, 12, 6, 1536, 16), "B16": (768, 12, 12, 3072, 16)}
QUICK = {"tiny": (64, 2, 4, 128, 8)}
HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")  # the current results, linked from benchmarks/README.md (--update-results)
SCRATCH = os.path.join(os.path.dirname(HERE), "runs", "bench")  # every other run's output (ignored by git)
ARTIFACT_MODELS = ("Ti16", "S16", "B16")


def vit_flops(hidden, layers, mlp, patch, image, classes=1000, channels=3):
    """Forward FLOPs per image (2 x multiply-accumulates) of a token-classifier ViT."""
    n = (image // patch) ** 2
    s = n + 1
    macs = n * patch * patch * channels * hidden  # patch embedding
    macs += layers * (4 * s * hidden * hidden + 2 * s * s * hidden + 2 * s * hidden * mlp)
    macs += hidden * classes
    return 2 * macs


def _median_rate(times, images):
    return images / statistics.median(times)


def matmul_peak(dtype, n=4096, repeats=5):
    """This machine's matrix-multiply peak in GFLOP/s for `dtype` ("float32" or "bfloat16").

    The best n x n x n product of `repeats` runs each of TensorFlow with XLA, TensorFlow without XLA
    (oneDNN) and PyTorch (oneDNN/MKL): the fastest of the libraries measured here is the peak.
    Returns (GFLOP/s, which library gave it).
    """
    import tensorflow as tf
    import torch

    flop = 2 * n**3
    best = {}
    a = tf.cast(tf.random.normal((n, n)), dtype)
    for label, jit in (("TensorFlow+XLA", True), ("TensorFlow", False)):
        f = tf.function(lambda x: tf.matmul(x, x), jit_compile=jit)
        best[label] = flop / min(wall_times(lambda: f(a).numpy(), repeats, warmup=1)) / 1e9
    t = torch.randn(n, n).to(getattr(torch, dtype))
    best["PyTorch"] = flop / min(wall_times(lambda: torch.matmul(t, t), repeats, warmup=1)) / 1e9
    label = max(best, key=best.get)
    return best[label], label


class _StepTimer:
    def __init__(self):
        import keras

        class Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.times = []

            def on_train_batch_begin(self, batch, logs=None):
                self._start = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                self.times.append(time.perf_counter() - self._start)

        self.callback = Timer()


def keras_models(name, config, image, classes=1000, only=None):
    """{"keras_vit": model, "keras-hub": model} of the same configuration (float32 logits); `only`: just that one."""
    import keras

    import keras_vit

    hidden, layers, heads, mlp, patch = config
    if only == "keras-hub":
        return {"keras-hub": keras_hub_model(name, config, image, classes)}
    ours = keras_vit.VisionTransformer(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                       mlp_dim=mlp, input_shape=(image, image, 3), classes=classes,
                                       classifier_activation=None, name=f"keras_vit_{name}")
    if only == "keras_vit":
        return {"keras_vit": ours}
    return {"keras_vit": ours, "keras-hub": keras_hub_model(name, config, image, classes)}


def train_keras(model, batch, steps, warmup, jit):
    import keras
    import tensorflow as tf

    x = np.random.default_rng(0).uniform(-1, 1, (batch, *model.input_shape[1:])).astype("float32")
    y = np.arange(batch) % model.output_shape[-1]
    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.compile(optimizer=keras.optimizers.AdamW(1e-4, global_clipnorm=1.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
    timer = _StepTimer().callback
    model.fit(ds, steps_per_epoch=warmup + steps, epochs=1, verbose=0, callbacks=[timer], shuffle=False)
    if jit and not model.jit_compile:
        return None  # Keras fell back: not an XLA figure
    return _median_rate(timer.times[warmup:], batch)


def infer_keras(model, batch, steps, warmup, jit=True):
    import tensorflow as tf

    x = tf.constant(np.random.default_rng(0).uniform(-1, 1, (batch, *model.input_shape[1:])).astype("float32"))
    f = tf.function(lambda v: model(v, training=False), jit_compile=jit)
    return batch / median_seconds(lambda: f(x).numpy(), steps, warmup)


def _row(section, impl, model, precision, xla, batch, rate, flops, peaks, extra=""):
    """One figure. Its share of the matrix-multiply peak of its precision: bfloat16's, else float32's (float16 TFLite
    files compute in float32); none for int8, whose integer matrix products have a peak of their own, not measured,
    which could pass 100% of the float32 one."""
    gflops = None if rate is None else rate * flops / 1e9
    peak = None if precision == "int8" else peaks["bfloat16" if "bfloat16" in precision else "float32"]
    return {
        "section": section, "implementation": impl, "model": model, "precision": precision, "xla": xla,
        "batch": batch, "images_per_s": rate, "gflops": gflops,
        "fraction_of_peak": None if gflops is None or peak is None else gflops / peak, "note": extra,
    }


def train_row(name, config, image, batch, steps, warmup, peaks, impl, precision, jit):
    """One training figure: `impl` ("keras_vit", "keras-hub", "torch", "torch_compile"; "keras_vit" also on the JAX
    and PyTorch backends, whichever Keras runs) in `precision`, XLA `jit` (Keras on TensorFlow and JAX only).
    Keras is imported only for a Keras figure (the process's peak, `_child`, imports TensorFlow and PyTorch anyway)."""
    hidden, layers, heads, mlp, patch = config
    flops = 3 * vit_flops(hidden, layers, mlp, patch, image)
    if impl in ("torch", "torch_compile"):
        compiled = impl == "torch_compile"
        rate = train_torch(config, image, batch, steps, warmup, bf16=precision != "float32", compiled=compiled)
        return _row("train", TORCH_PEERS[impl], name, precision, "n/a", batch, rate, flops, peaks,
                    ("torch.compile" if compiled else "eager") + (", autocast bfloat16" if precision != "float32" else ""))
    import keras

    backend = keras.backend.backend()
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = keras_models(name, config, image, only=impl)[impl]
        rate = train_keras(model, batch, steps, warmup, jit)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    if backend != "tensorflow":
        return _row("train", BACKENDS[backend], name, precision, "on" if backend == "jax" else "n/a", batch, rate,
                    flops, peaks, "jax.jit" if backend == "jax" else "eager")
    return _row("train", impl, name, precision, "on" if jit else "off", batch, rate, flops, peaks)


def infer_rows(name, config, image, batches, steps, warmup, peaks, impl=None):
    """Inference figures (float32) at each batch size: with `impl` None, keras_vit and keras-hub (Keras with XLA) and
    HF's PyTorch ViT (eager) on the backend Keras runs: TensorFlow, or JAX / PyTorch (keras_vit alone); with
    `impl="torch_compile"`, HF's ViT under `torch.compile` (Keras not imported: see `train_row`)."""
    hidden, layers, heads, mlp, patch = config
    flops = vit_flops(hidden, layers, mlp, patch, image)
    rows = []
    if impl == "torch_compile":
        for batch in batches:
            rate = infer_torch(config, image, batch, steps, warmup, compiled=True)
            rows.append(_row("infer", TORCH_PEERS[impl], name, "float32", "n/a", batch, rate, flops, peaks,
                             "torch.compile, inference_mode"))
        return rows
    import keras

    keras.mixed_precision.set_global_policy("float32")
    backend = keras.backend.backend()
    if backend != "tensorflow":
        model = keras_models(name, config, image, only="keras_vit")["keras_vit"]
        for batch in batches:
            rate = infer_backend(model, batch, steps, warmup)
            rows.append(_row("infer", BACKENDS[backend], name, "float32", "on" if backend == "jax" else "n/a", batch,
                             rate, flops, peaks, "jax.jit" if backend == "jax" else "eager, inference_mode"))
        return rows
    built = keras_models(name, config, image)
    for batch in batches:
        for impl, model in built.items():
            rate = infer_keras(model, batch, steps, warmup)
            rows.append(_row("infer", impl, name, "float32", "on", batch, rate, flops, peaks))
        rate = infer_torch(config, image, batch, steps, warmup)
        rows.append(_row("infer", TORCH_PEERS["torch"], name, "float32", "n/a", batch, rate, flops, peaks,
                         "eager, inference_mode"))
    return rows


def jobs(models, sections):
    """The figures to measure, one job per process: memory a framework keeps after a model (XLA executables,
    allocator caches) is returned to the system when the process ends; in one process a full run outgrew
    24 GB during B/16. A job with a "backend" runs Keras on that backend (`benchmarks.peers.backend_env`)."""
    out = []
    for name in models:
        if "train" in sections:
            for precision in ("float32", "mixed_bfloat16"):
                for jit in (True, False):
                    for impl in ("keras_vit", "keras-hub"):
                        out.append({"kind": "train", "model": name, "impl": impl, "precision": precision, "jit": jit})
                for backend, jit in (("jax", True), ("torch", False)):
                    out.append({"kind": "train", "model": name, "impl": "keras_vit", "precision": precision,
                                "jit": jit, "backend": backend})
                for impl in TORCH_PEERS:
                    out.append({"kind": "train", "model": name, "impl": impl, "precision": precision, "jit": None})
        if "infer" in sections:
            out.append({"kind": "infer", "model": name})
            out.append({"kind": "infer", "model": name, "impl": "torch_compile"})
            for backend in BACKENDS:
                out.append({"kind": "infer", "model": name, "backend": backend})
    if "artifacts" in sections:  # Ti/16, S/16 and B/16: issue 30's bars for the exported files
        out += [{"kind": "artifacts", "model": name} for name in models if name in ARTIFACT_MODELS] or \
            [{"kind": "artifacts", "model": next(iter(models))}]
    return out


def run_job(job, models, image, batch, steps, warmup, peaks):
    """Measures one job of `jobs` in this process (Keras on the job's backend already); returns its rows."""
    name = job["model"]
    config = models[name]
    if job["kind"] == "train":
        return [train_row(name, config, image, batch, steps, warmup, peaks, job["impl"], job["precision"],
                          job["jit"])]
    if job["kind"] == "infer":
        return infer_rows(name, config, image, (1, 8), steps, warmup, peaks, impl=job.get("impl"))
    return bench_artifacts(name, config, image, (1, 8), steps, warmup, peaks)


def run_isolated(job, settings):
    """Runs `job` in a child Python process; returns its rows, or [] (with a message) when the child failed."""
    import subprocess

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = [sys.executable, "-m", "benchmarks.run", "--job", json.dumps({**settings, "job": job, "out": out})]
        proc = subprocess.run(cmd, cwd=os.path.dirname(HERE), env=backend_env(job.get("backend", "tensorflow")))
        if proc.returncode != 0 or not os.path.exists(out):
            print(f"  job {job} failed (exit status {proc.returncode}); its figures are missing", flush=True)
            return []
        with open(out) as f:
            rows = json.load(f)
    for row in rows:
        print(one_line(row), flush=True)
    return rows


def run_edge(models, quick, update_results, output_dir):
    """The edge table (benchmarks/edge.py: every TFLite and ONNX mode, batch 1, 1 and 2 threads) in a child process.

    Its JSON goes to `output_dir`/edge.json; with `update_results` the child also writes the table as the current
    results (benchmarks/results/edge.md). Returns False when the child failed.
    """
    import subprocess

    from benchmarks.edge_models import MODELS

    names = [m for m in models if m in MODELS]
    if not quick and not names:
        print(f"edge table: none of {', '.join(models)} is in it ({', '.join(MODELS)}); skipped", flush=True)
        return True
    cmd = [sys.executable, "-m", "benchmarks.edge", "--output", os.path.join(output_dir, "edge.json")]
    if quick:
        cmd.append("--quick")
    elif set(names) != set(MODELS):
        cmd += ["--models", ",".join(names)]
    if update_results:
        cmd.append("--update-results")
    proc = subprocess.run(cmd, cwd=os.path.dirname(HERE))
    if proc.returncode != 0:
        print(f"edge table failed (exit status {proc.returncode}); its figures are missing", flush=True)
    return proc.returncode == 0


def _child(spec):
    """The child side of `run_isolated`: measure, write the rows as JSON. With `spec["peaks"]` None the child first
    measures this machine's matrix-multiply peaks itself (`matmul_peak`: TensorFlow with and without XLA and PyTorch,
    2 timed products each; not JAX's), so that a row's fraction of peak divides by a peak measured in the row's own
    process (issue 30, item 1)."""
    size = spec.get("peak_size", 4096)
    peaks = spec["peaks"] or {dtype: matmul_peak(dtype, n=size, repeats=2)[0] for dtype in ("float32", "bfloat16")}
    rows = run_job(spec["job"], {k: tuple(v) for k, v in spec["models"].items()}, spec["image"], spec["batch"],
                   spec["steps"], spec["warmup"], peaks)
    for row in rows:
        row["peak_gflops"] = peaks["bfloat16" if "bfloat16" in row["precision"] else "float32"]
    with open(spec["out"], "w") as f:
        json.dump(rows, f)
    return True


def bench_artifacts(name, config, image, batches, steps, warmup, peaks):
    """Latency of every exported artifact of keras_vit's model, each in its own runtime."""
    import keras
    import tensorflow as tf

    from export import export_onnx, export_saved_model, export_tflite
    from export.signature import ServingGraph

    hidden, layers, heads, mlp, patch = config
    flops = vit_flops(hidden, layers, mlp, patch, image)
    keras.mixed_precision.set_global_policy("float32")
    model = keras_models(name, config, image)["keras_vit"]
    calibration = np.random.default_rng(1).uniform(-1, 1, (8, image, image, 3)).astype("float32")
    rows = []
    # One serving graph for every file, as export_all does. Latency only: random weights calibrated on noise
    # would fail the agreement bars, and the files' numbers are proven by the export tests.
    with tempfile.TemporaryDirectory() as tmp, ServingGraph(model) as graph:
        saved = export_saved_model(graph, os.path.join(tmp, "saved_model"), verify=False)
        # batch_size=None: these files are timed at batch 1 and 8 (TFLite files default to a fixed batch of 1)
        files = {q: export_tflite(graph, os.path.join(tmp, f"{q}.tflite"), quantization=q,
                                  representative_data=calibration if q == "int8" else None, batch_size=None,
                                  verify=False)
                 for q in ("float32", "float16", "int8")}
        onnx_files = {"ONNX Runtime": export_onnx(graph, os.path.join(tmp, "model.onnx"), verify=False),
                      "ONNX Runtime (float32_fused)": export_onnx(graph, os.path.join(tmp, "fused.onnx"), verify=False,
                                                                  quantization="float32_fused")}
        for batch in batches:
            x = np.random.default_rng(0).uniform(-1, 1, (batch, image, image, 3)).astype("float32")
            serve = tf.saved_model.load(saved).signatures["serving_default"]
            rows.append(_latency_row("SavedModel (TF)", name, batch, lambda: serve(images=tf.constant(x)),
                                     steps, warmup, flops, peaks))
            for q, path in files.items():
                for threads in (1, 2):
                    run = litert_runner(path, x, threads)
                    rows.append(_latency_row(f"TFLite {q} (LiteRT, {threads} thread{'s' * (threads > 1)})", name,
                                             batch, run, steps, warmup, flops, peaks, precision=q))
            import onnxruntime as ort

            for impl, onnx_path in onnx_files.items():  # one session alive at a time (benchmarks/onnx_fusion.py)
                session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
                feed = {session.get_inputs()[0].name: x}
                rows.append(_latency_row(impl, name, batch, lambda: session.run(None, feed), steps, warmup,
                                         flops, peaks))
                del session
    return rows


def litert_runner(path, x, threads):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=threads)
    detail = interpreter.get_input_details()[0]
    interpreter.resize_tensor_input(detail["index"], x.shape)
    interpreter.allocate_tensors()
    detail = interpreter.get_input_details()[0]
    data = x
    if detail["dtype"] != np.float32:  # int8 I/O: quantize with the file's scale
        scale, zero = detail["quantization"]
        data = np.clip(np.round(x / scale + zero), -128, 127).astype(detail["dtype"])

    def run():
        interpreter.set_tensor(detail["index"], data)
        interpreter.invoke()

    return run


def _latency_row(impl, name, batch, call, steps, warmup, flops, peaks, precision="float32"):
    """An artifact's row (`_row`) with its latency."""
    seconds = median_seconds(call, steps, warmup)
    row = _row("artifacts", impl, name, precision, "n/a", batch, batch / seconds, flops, peaks)
    row["latency_ms"] = 1000 * seconds
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma list of Ti16, S16, B16 (default: all)")
    parser.add_argument("--sections", default=None,
                        help="comma list of train, infer, artifacts, edge (default: all)")
    parser.add_argument("--image-size", type=int, default=None, help="pixels, a multiple of 16 (default 224)")
    parser.add_argument("--train-batch", type=int, default=None, help="training batch (default 8)")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per figure (default 3)")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps first, >= 1: XLA compiles here (default 2)")
    parser.add_argument("--quick", action="store_true",
                        help="a tiny model at 32 px, 1 timed step: a smoke run of a few minutes")
    parser.add_argument("--output-dir", default=None,
                        help="where latest.json and latest.md go (default: runs/bench; not with --update-results)")
    parser.add_argument("--update-results", action="store_true",
                        help="save the table as the current results in benchmarks/results/, which "
                             "benchmarks/README.md links to (full runs only)")
    parser.add_argument("--job", help=argparse.SUPPRESS)  # internal: run one job (see run_isolated)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.job:
        return _child(json.loads(args.job))
    tuning = {"--models": args.models, "--image-size": args.image_size, "--steps": args.steps,
              "--warmup": args.warmup, "--train-batch": args.train_batch}
    if args.quick:
        given = [flag for flag, value in tuning.items() if value is not None]
        if given:
            parser.error(f"--quick sets its own model, size and steps; drop {', '.join(given)}")
        models, image, steps, warmup, batch = QUICK, 32, 1, 1, 4
    else:
        names = (args.models or ",".join(SIZES)).split(",")
        unknown = [m for m in names if m not in SIZES]
        if unknown:
            parser.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(SIZES)})")
        models = {m: SIZES[m] for m in names}
        image = 224 if args.image_size is None else args.image_size
        steps = 3 if args.steps is None else args.steps
        warmup = 2 if args.warmup is None else args.warmup
        batch = 8 if args.train_batch is None else args.train_batch
        for flag, value, low in (("--steps", steps, 1), ("--warmup", warmup, 1), ("--train-batch", batch, 1)):
            if value < low:
                parser.error(f"{flag} must be >= {low}. Received: {value}")
        if image < 16 or image % 16:
            parser.error(f"--image-size must be a multiple of 16 (the patch size), at least 16. Received: {image}")
    sections = (args.sections or "train,infer,artifacts,edge").split(",")
    unknown = [x for x in sections if x not in ("train", "infer", "artifacts", "edge")]
    if unknown:
        parser.error(f"--sections: unknown {', '.join(unknown)} (choose from train, infer, artifacts, edge)")
    # The results tables need every model, the default settings and the train, infer and artifacts sections; the
    # edge table has a results file of its own (results/edge.md), so `--sections train,infer,artifacts` is a full
    # run of the results tables.
    full = not args.quick and all(value is None for value in tuning.values()) and \
        {"train", "infer", "artifacts"} <= set(sections)
    if args.update_results:
        if not full:
            parser.error("--update-results needs a full run (no --quick, --models or other settings; --sections "
                         "with at least train, infer and artifacts): the current results and the README's text "
                         "describe one")
        if args.output_dir is not None:
            parser.error(f"--update-results writes the current results to {RESULTS}; drop --output-dir")
    # Without --update-results even a full run leaves the current results as they are.
    output_dir = RESULTS if args.update_results else (args.output_dir or SCRATCH)
    peak_size = 1024 if args.quick else 4096  # --quick: a smoke run, its peaks only roughly this machine's
    measured = {dtype: matmul_peak(dtype, n=peak_size) for dtype in ("float32", "bfloat16")}
    peaks = {dtype: value for dtype, (value, _) in measured.items()}
    peak_sources = {dtype: source for dtype, (_, source) in measured.items()}
    print(f"matmul peak: float32 {peaks['float32']:.0f} GFLOP/s ({peak_sources['float32']}), "
          f"bfloat16 {peaks['bfloat16']:.0f} GFLOP/s ({peak_sources['bfloat16']})", flush=True)
    # peaks None: each child measures its own (`_child`); the parent's figures head the tables. --quick (a smoke run,
    # two jobs sharing the CPU) hands the parent's peaks down: measuring them again in each of its 28 children (TensorFlow
    # with and without XLA and PyTorch, float32 and emulated bfloat16) took 8.4 s a child, plus 2.1 s importing PyTorch,
    # on an AVX2-only AMD EPYC (benchmarks/findings/suite-time-avx2.md).
    settings = {"models": models, "image": image, "batch": batch, "steps": steps, "warmup": warmup,
                "peaks": peaks if args.quick else None, "peak_size": peak_size}
    rows, failed = [], 0
    # A full or partial run measures one job at a time. --quick checks that every job runs, not how fast: it runs two
    # at a time (the test suite's smoke run took 4 minutes one by one), so its figures come from a shared CPU.
    jobs_at_once = 2 if args.quick else 1
    with ThreadPoolExecutor(max_workers=jobs_at_once) as pool:
        for got in pool.map(lambda job: run_isolated(job, settings), jobs(models, sections)):
            rows += got
            failed += not got
    if "edge" in sections:
        failed += not run_edge(models, args.quick, args.update_results, output_dir)
    import keras
    import tensorflow as tf
    import torch

    result = {
        "machine": f"{cpu()}, {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}, "
                   f"TensorFlow {tf.__version__}, Keras {keras.__version__}, PyTorch {torch.__version__}",
        "quick": args.quick, "jobs_at_once": jobs_at_once, "models": list(models), "sections": sections,
        "failed_jobs": failed,
        "image_size": image, "steps": steps, "warmup": warmup, "peaks": peaks, "peak_sources": peak_sources,
        "peak_size": peak_size,
        "rows": rows,
        "headline": headline(rows),
        "best_settings": best_settings(rows),
        "files_against_torch": files_against_torch(rows),
    }
    table = markdown(result)
    print()
    print(table)
    from keras_vit.common.files import staged

    stem = "latest" if not failed else "incomplete"  # a run with missing figures never replaces the last good one
    for suffix, text in ((".json", json.dumps(result, indent=1)), (".md", table + "\n")):
        with staged(os.path.join(output_dir, stem + suffix), overwrite=True) as tmp, open(tmp, "w") as f:
            f.write(text)
    print(f"\nwritten: {os.path.join(output_dir, stem)}.json and .md", flush=True)
    if failed:
        print(f"{failed} job(s) failed (above); {os.path.join(output_dir, 'latest')}.json and .md left as they were",
              file=sys.stderr)
        return None
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
