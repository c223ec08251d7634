"""Where a full-integer int8 ViT's time goes in LiteRT, and what symmetric matmul operands change.

    .venv/bin/python -m benchmarks.int8_graph [--model ViTTi16] [--image-size 224] [--rounds 5] [--runs 20]

For one model (random weights, seed 0; logits output, batch 1): the float32 and full-integer int8
(`full_integer_int8`, the NPU file) TFLite files (TensorFlow's converter, 8 seeded calibration images) and that
file passed through `export.int8_graph.symmetric_matmul_operands`. The phone-CPU `int8` file (LiteRT Quantizer,
float32 between its int8 matrix products) is not studied here. For each file:
- its op profile (`export.profile.tflite_profile`): ops, ops on XNNPACK, XNNPACK partitions;
- per-op-type time: LiteRT 2.3's Python API has no profiler, so every op is cut out of the file into
  a one-op model (same tensors, quantisation parameters and weights), fed its inputs' values from a
  whole-graph run and timed alone, with XNNPACK where the full graph gives the op to XNNPACK and on
  the builtin kernels where it does not (`export.profile.op_times`); the sum leaves out what passing
  data between partitions costs;
- batch-1 latency of the whole file on 1 and 2 threads, the files in alternation (`--rounds`), a
  figure being the median over rounds of the median of `--runs` calls; the ratio to float32 is the
  median over rounds of each round's ratio (the machine's load changes between rounds);
- max |output - Keras| / max |Keras| on 16 seeded inputs, and the two full-integer files against each other.
"""

import argparse
import collections
import os
import tempfile
from unittest import mock

import numpy as np

# The full-integer (integer-only) TFLite mode: TensorFlow's converter, every op int8 (`export.modes`)
FULL = "full_integer_int8"
SYMMETRIC = f"{FULL}, symmetric matmul operands"


def op_times(path, runs=20):
    """`{(op, "xnnpack" | "builtin"): [count, ms]}`: each op timed alone where the full graph runs it, 1 thread
    (`export.profile.op_times`)."""
    from export import profile

    rows = collections.defaultdict(lambda: [0, 0.0])
    for t in profile.op_times(path, 1, runs):
        row = rows[(t["op"], "xnnpack" if t["xnnpack"] else "builtin")]
        row[0] += 1
        row[1] += t["ms"]
    return dict(rows)


def _tflite_outputs(path, images):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path, num_threads=1)
    interpreter.allocate_tensors()
    inp, out = interpreter.get_input_details()[0], interpreter.get_output_details()[0]
    results = []
    for image in images:
        interpreter.set_tensor(inp["index"], image[None].astype("float32"))
        interpreter.invoke()
        results.append(interpreter.get_tensor(out["index"])[0].astype("float64"))
    return np.stack(results)


def build(name, image_size):
    """A model with random weights (the head too): "tiny" (smoke test) or a keras_vit variant name such as "ViTTi16"."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    if name == "tiny":
        model = keras_vit.VisionTransformer(patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                           input_shape=(image_size, image_size, 3), classes=10,
                                           classifier_activation=None, name="tiny")
    else:
        model = getattr(keras_vit, name)(weights=None, input_shape=(image_size, image_size, 3), classes=1000,
                                         classifier_activation=None)
    head = model.get_layer("predictions")  # zero-initialised: give it random weights, so logits are not all 0
    kernel, bias = head.get_weights()
    head.set_weights([np.random.default_rng(1).normal(0, 0.02, kernel.shape).astype("float32"), bias])
    return model


def measure(name="ViTTi16", image_size=224, rounds=5, runs=20, folder=None, per_op=True):
    """Rows per file: ops, XNNPACK ops and partitions, latency (1 and 2 threads), error; and per-op times."""
    from export import export_tflite
    from export.int8_graph import symmetric_matmul_operands
    from export.profile import graph_latency_ms, tflite_profile
    from export.signature import ServingGraph

    folder = folder or tempfile.mkdtemp(prefix="keras_vit_int8_graph_")
    model = build(name, image_size)
    rng = np.random.default_rng(0)
    calibration = rng.uniform(-1, 1, (8, image_size, image_size, 3)).astype("float32")
    images = rng.uniform(-1, 1, (16, image_size, image_size, 3)).astype("float32")
    paths = {}
    # FULL is TensorFlow's converter's own file: export.tflite.convert's rewrite is switched off for it
    with ServingGraph(model, batch_size=1, scores="logits") as graph, \
            mock.patch("export.int8_graph.symmetric_matmul_operands", lambda content: (content, 0)):
        for quantization in ("float32", FULL):
            paths[quantization] = os.path.join(folder, f"{name}_{quantization}.tflite")
            export_tflite(graph, paths[quantization], quantization=quantization, representative_data=calibration,
                          overwrite=True, progress=False, verify=False)
    with open(paths[FULL], "rb") as f:
        content, changed = symmetric_matmul_operands(f.read())
    paths[SYMMETRIC] = os.path.join(folder, f"{name}_{FULL}_symmetric.tflite")
    with open(paths[SYMMETRIC], "wb") as f:
        f.write(content)
    reference = np.asarray(model.predict(images, verbose=0), "float64")
    outputs = {kind: _tflite_outputs(path, images) for kind, path in paths.items()}
    rows = []
    for kind, path in paths.items():
        profile = tflite_profile(path, measure_latency=False)
        rows.append({"file": kind, "ops": profile["num_ops"], "xnnpack_ops": profile["xnnpack_ops"],
                     "partitions": profile["xnnpack_partitions"],
                     "off": {r["op"]: r["off_delegate"] for r in profile["ops"] if r["off_delegate"]},
                     "error": float(np.abs(outputs[kind] - reference).max() / np.abs(reference).max()),
                     "path": path})
    times = collections.defaultdict(list)
    for _ in range(rounds):
        for row in rows:
            for threads in (1, 2):
                times[(row["path"], threads)].append(graph_latency_ms(row["path"], threads, True, runs))
    first = rows[0]["path"]  # float32: each round's ratio is taken against its own float32 figure
    for row in rows:
        row["ms_1_thread"], row["ms_2_threads"] = (float(np.median(times[(row["path"], t)])) for t in (1, 2))
        row["ratio_1_thread"] = float(np.median(np.divide(times[(row["path"], 1)], times[(first, 1)])))
        row["per_op"] = op_times(row["path"], runs) if per_op else {}
    full = outputs[FULL]
    between = float(np.abs(outputs[SYMMETRIC] - full).max() / np.abs(full).max())
    return rows, {"tensors_rewritten": changed, "int8_files_apart": between}


def markdown(rows, extra):
    """The rows as two Markdown tables (files; per-op time of each file)."""
    lines = ["| file | ops | on XNNPACK | partitions | off XNNPACK | ms, 1 thread | x float32 (median of rounds) "
             "| ms, 2 threads "
             "| max abs error / max abs Keras |", "|" + "---|" * 9]
    for r in rows:
        off = ", ".join(f"{op} {n}" for op, n in r["off"].items()) or "-"
        lines.append(f"| {r['file']} | {r['ops']} | {r['xnnpack_ops']} | {r['partitions']} | {off} | "
                     f"{r['ms_1_thread']:.2f} | {r['ratio_1_thread']:.2f} | {r['ms_2_threads']:.2f} | "
                     f"{r['error']:.2e} |")
    lines.append(f"\nTensors rewritten: {extra['tensors_rewritten']}; the two {FULL} files' outputs apart by "
                 f"{extra['int8_files_apart']:.2e} of the {FULL} outputs' max.\n")
    for r in rows:
        if not r["per_op"]:
            continue
        total = sum(ms for _, ms in r["per_op"].values())
        lines += [f"Per-op time, {r['file']} (one-op models, 1 thread; sum {total:.2f} ms):", "",
                  "| op | runs on | count | ms |", "|---|---|---|---|"]
        for (op, where), (count, ms) in sorted(r["per_op"].items(), key=lambda kv: -kv[1][1]):
            lines.append(f"| {op} | {where} | {count} | {ms:.3f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="ViTTi16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    rows, extra = measure(args.model, args.image_size, args.rounds, args.runs)
    print(markdown(rows, extra))


if __name__ == "__main__":
    main()
