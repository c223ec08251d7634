"""LiteRT Quantizer's TFLite modes against float32: file size, batch-1 latency, ops on XNNPACK.

    .venv/bin/python -m benchmarks.litert_modes [--image-size 224] [--rounds 3] [--runs 10] [--threads 1]

ViT-Ti/16 (random weights, seed 0; a zero-initialised head makes top-1 agreement meaningless, so
only size and speed are measured here). From one float32 serving graph at batch 1: TensorFlow's
float32 and dynamic_int8 files, and LiteRT Quantizer's int16x8 (16 seeded calibration images),
weight_only_int8 and weight_only_int4 (`export.litert_quantization`). The files are timed in
alternation, `--rounds` times, with `export.profile.graph_latency_ms`; a figure is the median over
rounds, and its ratio to float32 is taken per round. Each file's op profile gives the ops XNNPACK
takes, its partitions and the op types it leaves to LiteRT's builtin kernels.
"""

import argparse
import os
import tempfile

import numpy as np

MODES = ("float32", "dynamic_int8", "int16x8", "weight_only_int8", "weight_only_int4")


def measure(image_size=224, rounds=3, runs=10, threads=1, folder=None):
    """Returns {mode: {"size_mb", "size_ratio", "latency_ms", "latency_ratio", "ops", "xnnpack_ops", "partitions", "off"}}."""
    import keras

    import keras_vit
    from export import tflite
    from export.litert_quantization import LITERT_QUANTIZATIONS, quantize
    from export.profile import graph_latency_ms, tflite_profile
    from export.signature import ServingGraph

    keras.utils.set_random_seed(0)
    model = keras_vit.ViTTi16(weights=None, input_shape=(image_size, image_size, 3), classes=1000)
    calibration = np.random.default_rng(0).uniform(-1, 1, (16, image_size, image_size, 3)).astype("float32")
    folder = folder or tempfile.mkdtemp(prefix="litert-modes-")
    with ServingGraph(model, batch_size=1) as graph:
        files = {q: tflite.convert(graph, q, progress=False) for q in ("float32", "dynamic_int8")}
    for q in LITERT_QUANTIZATIONS:
        files[q] = quantize(files["float32"], q, calibration)
    paths = {}
    for q, content in files.items():
        paths[q] = os.path.join(folder, f"model_{q}.tflite")
        with open(paths[q], "wb") as f:
            f.write(content)
    times = {q: [] for q in MODES}
    for _ in range(rounds):
        for q in MODES:
            times[q].append(graph_latency_ms(paths[q], num_threads=threads, runs=runs))
    rows = {}
    for q in MODES:
        profile = tflite_profile(paths[q], num_threads=threads, measure_latency=False)
        rows[q] = {
            "size_mb": len(files[q]) / 1e6,
            "size_ratio": len(files[q]) / len(files["float32"]),
            "latency_ms": float(np.median(times[q])),
            "latency_ratio": float(np.median(np.array(times[q]) / np.array(times["float32"]))),
            "ops": profile["num_ops"],
            "xnnpack_ops": profile["xnnpack_ops"],
            "partitions": profile["xnnpack_partitions"],
            "off": {op["op"]: op["off_delegate"] for op in profile["ops"] if op["off_delegate"]},
        }
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    rows = measure(args.image_size, args.rounds, args.runs, args.threads)
    print(f"ViT-Ti/16 {args.image_size} px, batch 1, {args.threads} thread(s), random weights")
    print("| mode | size MB | x float32 | latency ms | x float32 | ops on XNNPACK | partitions | off XNNPACK |")
    print("|---|---|---|---|---|---|---|---|")
    for q, r in rows.items():
        off = ", ".join(f"{n} {op}" for op, n in r["off"].items()) or "-"
        print(f"| {q} | {r['size_mb']:.2f} | {r['size_ratio']:.3f} | {r['latency_ms']:.1f} | {r['latency_ratio']:.2f} | "
              f"{r['xnnpack_ops']}/{r['ops']} | {r['partitions']} | {off} |")


if __name__ == "__main__":
    main()
