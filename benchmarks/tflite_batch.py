"""TFLite files with a dynamic batch against a fixed batch of 1: ops, shape ops, XNNPACK partitions, latency.

    .venv/bin/python -m benchmarks.tflite_batch [--models demo,ViTTi16] [--rounds 5] [--runs 20]

For each model (random weights, seed 0), the float32 and full-integer int8 (`full_integer_int8`, 16 seeded
calibration images) TFLite files are written with `batch_size=None` and `batch_size=1` from one serving graph
per batch, profiled with `export.profile.tflite_profile` (op count, SHAPE/GATHER/REDUCE_PROD/PACK
count, ops on XNNPACK, partitions) and timed at batch 1 with 1 and 2 LiteRT threads. The files are
timed in alternation, `--rounds` times, so that the machine's load falls on all of them alike; a
figure is the median over rounds of the median of `--runs` calls. This measurement chose the
fixed batch of 1 as the default of TFLite files (benchmarks/findings/tflite-batch.md).
"""

import argparse
import os
import tempfile

import numpy as np

SHAPE_OPS = ("SHAPE", "GATHER", "REDUCE_PROD", "PACK")
# the modes measured: float32 and TensorFlow's full-integer int8 file (`export.modes`), as in the finding
MODES = ("float32", "full_integer_int8")


def build(name):
    """A model with random weights: "tiny" (smoke test), "demo" (`keras-vit-train`'s default) or a variant."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    small = {"tiny": (16, 4, 32, 1, 2, 64), "demo": (16, 4, 128, 4, 4, 512)}
    if name in small:
        size, patch, hidden, layers, heads, mlp = small[name]
        return keras_vit.VisionTransformer(patch_size=patch, hidden_size=hidden, num_layers=layers, num_heads=heads,
                                           mlp_dim=mlp, input_shape=(size, size, 3), classes=10,
                                           classifier_activation=None, name=name)
    return getattr(keras_vit, name)(weights=None, input_shape=(224, 224, 3), classes=1000, classifier_activation=None)


def measure(names, rounds=5, runs=20, folder=None):
    """Rows `{model, quantization, batch, ops, shape_ops, xnnpack_ops, partitions, ms_1_thread, ms_2_threads}`."""
    from export import export_tflite
    from export.profile import graph_latency_ms, tflite_profile
    from export.signature import ServingGraph

    folder = folder or tempfile.mkdtemp(prefix="keras_vit_tflite_batch_")
    rows = []
    for name in names:
        model = build(name)
        calibration = np.random.default_rng(0).uniform(-1, 1, (16, *model.input_shape[1:])).astype("float32")
        for batch in (None, 1):
            with ServingGraph(model, batch_size=batch) as graph:
                for quantization in MODES:
                    path = os.path.join(folder, f"{name}_{quantization}_{batch or 'dynamic'}.tflite")
                    export_tflite(graph, path, quantization=quantization, representative_data=calibration,
                                  batch_size=batch, overwrite=True, progress=False, verify=False)
                    profile = tflite_profile(path, measure_latency=False)
                    rows.append({"model": name, "quantization": quantization, "batch": batch or "dynamic",
                                 "ops": profile["num_ops"], "xnnpack_ops": profile["xnnpack_ops"],
                                 "shape_ops": sum(r["count"] for r in profile["ops"] if r["op"] in SHAPE_OPS),
                                 "partitions": profile["xnnpack_partitions"], "path": path})
    times = {}
    for _ in range(rounds):
        for row in rows:
            for threads in (1, 2):
                times.setdefault((row["path"], threads), []).append(graph_latency_ms(row["path"], threads, True, runs))
    for row in rows:
        path = row.pop("path")
        row["ms_1_thread"], row["ms_2_threads"] = (float(np.median(times[(path, t)])) for t in (1, 2))
    return rows


def markdown(rows):
    """The rows as a Markdown table."""
    lines = ["| model | quantization | batch | ops | SHAPE/GATHER/REDUCE_PROD/PACK | ops on XNNPACK | partitions "
             "| ms, 1 thread | ms, 2 threads |", "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['model']} | {r['quantization']} | {r['batch']} | {r['ops']} | {r['shape_ops']} | "
                     f"{r['xnnpack_ops']} | {r['partitions']} | {r['ms_1_thread']:.3f} | {r['ms_2_threads']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tflite_batch", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="demo,ViTTi16", help="comma list of tiny, demo or variant names")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    for name, value in (("rounds", args.rounds), ("runs", args.runs)):
        if value < 1:
            parser.exit(2, f"{parser.prog}: error: --{name} must be a positive int. Received: {value}\n")
    print(markdown(measure([m.strip() for m in args.models.split(",") if m.strip()], args.rounds, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
