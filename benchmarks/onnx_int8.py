"""ONNX int8 files from onnxruntime's quantisation tools against the float32 ONNX file: agreement, size, latency.

    .venv/bin/python -m benchmarks.onnx_int8 [--models trained,ViTTi16] [--rounds 5] [--runs 20]

Models: "trained" (the export tests' tiny ViT, 16 px, hidden 32, 1 layer, trained 15 epochs on
digits; calibrated on 200 training images, checked on 360 held-out ones) and keras_vit variants
at 224 px with random weights (seed 0; the zero-initialised head is given N(0, 0.02^2) weights so
that the outputs differ between images; calibrated on 16 and checked on 64 seeded noise images).
Variants: "dynamic_int8" (`quantize_dynamic`), and "int8" (`quantize_static`, QDQ, min/max)
as `export_onnx` writes it (per-channel weights, `quant_pre_process`, QDQ around MatMul/Gemm/Conv)
and with one choice changed: int8 activations, per-tensor weights, no pre-processing, Add
quantised too, every op. Figures: size,
relative max |diff| and decisive top-1 agreement against Keras (`export.tolerances.compare`, images
one at a time, as an app runs them), and batch-1 latency in onnxruntime with one thread
(`intra_op_num_threads=1`), the files timed in alternation `--rounds` times (a figure is the
median over rounds of the median of `--runs` calls), and its ratio to float32 from the same run.
"""

import argparse
import os
import tempfile
import time

import numpy as np

VARIANTS = (  # the first of each mode is what export_onnx writes
    ("float32", {}),
    ("dynamic_int8", {}),
    ("int8", {}),
    ("int8", {"activation_type": "int8"}),
    ("int8", {"per_channel": False}),
    ("int8", {"preprocess": False}),
    ("int8", {"op_types": ["MatMul", "Add"]}),
    ("int8", {"op_types": []}),  # every op type onnxruntime quantises
)


def build(name):
    """(model, calibration images, check images, check labels or None)."""
    import keras

    import keras_vit
    from keras_vit import data, training

    keras.utils.set_random_seed(0)
    if name == "trained":
        train = data.digits("train", image_size=16, batch_size=64, seed=0)
        model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                            input_shape=(16, 16, 3), classes=10, classifier_activation=None)
        training.compile_model(model, total_steps=15 * int(train.cardinality()), learning_rate=3e-3)
        model.fit(train, epochs=15, verbose=0, shuffle=False)
        calibration = np.concatenate([x.numpy() for x, _ in data.digits("train", image_size=16, batch_size=100)])[:200]
        held = [(x.numpy(), y.numpy()) for x, y in data.digits("validation", image_size=16, batch_size=360)]
        return model, calibration, np.concatenate([h[0] for h in held]), np.concatenate([h[1] for h in held])
    model = getattr(keras_vit, name)(weights=None, input_shape=(224, 224, 3), classes=1000, classifier_activation=None)
    head = model.get_layer("predictions")
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.02, head.kernel.shape).astype("float32"))
    rng = np.random.default_rng(1)
    noise = rng.uniform(-1, 1, (80, 224, 224, 3)).astype("float32")
    return model, noise[:16], noise[16:], None


def _session(path, threads=1):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _per_image(session, images):
    return np.concatenate([session.run(["predictions"], {"images": images[i : i + 1]})[0] for i in range(len(images))])


def _median_ms(session, image, runs):
    session.run(["predictions"], {"images": image})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(["predictions"], {"images": image})
        times.append(time.perf_counter() - start)
    return 1000.0 * float(np.median(times))


def measure(names, rounds=5, runs=20, folder=None):
    """Rows: model, variant, size_mb, size_ratio, relative_max_abs_diff, decisive_top1_agreement, accuracy_drop,
    batch_dependence (dynamic_int8: max |diff| between a batch and its images one at a time), ms_1_thread, ratio."""
    import tf2onnx

    from export.signature import OUTPUT_NAME
    from export.onnx import rename_output
    from export.onnx_quantization import quantize
    from export.signature import ServingGraph
    from export.tolerances import compare

    folder = folder or tempfile.mkdtemp(prefix="keras_vit_onnx_int8_")
    rows = []
    for name in names:
        model, calibration, images, labels = build(name)
        with ServingGraph(model) as graph:
            reference = graph.predict(images)
            proto, _ = tf2onnx.convert.from_function(graph.function, input_signature=[graph.input_spec], opset=17)
        rename_output(proto, OUTPUT_NAME)
        content = proto.SerializeToString()
        for quantization, options in VARIANTS:
            label = quantization + "".join(f" {k}={','.join(v) or 'all' if isinstance(v, list) else v}" for k, v in options.items())
            start = time.perf_counter()
            data = content if quantization == "float32" else quantize(content, quantization, calibration, **options)
            seconds = time.perf_counter() - start
            path = os.path.join(folder, f"{name}_{len(rows)}.onnx")
            with open(path, "wb") as f:
                f.write(data)
            session = _session(path)
            outputs = _per_image(session, images)
            figures = compare(reference, outputs, labels)
            batch = session.run(["predictions"], {"images": images[:32]})[0]
            rows.append({"model": name, "variant": label, "path": path, "size_mb": len(data) / 1e6,
                         "quantize_s": seconds, "relative_max_abs_diff": figures["relative_max_abs_diff"],
                         "decisive_top1_agreement": figures["decisive_top1_agreement"],
                         "top1_agreement": figures["top1_agreement"],
                         "accuracy_drop": figures.get("accuracy_drop"),
                         "batch_dependence": float(np.abs(batch - outputs[:32]).max())})
            print(rows[-1], flush=True)
    times = {}
    sessions = {row["path"]: _session(row["path"]) for row in rows}
    for _ in range(rounds):
        for row in rows:
            image = np.zeros((1, *sessions[row["path"]].get_inputs()[0].shape[1:]), "float32") + 0.1
            times.setdefault(row["path"], []).append(_median_ms(sessions[row["path"]], image, runs))
    for row in rows:
        row["ms_1_thread"] = float(np.median(times[row.pop("path")]))
    for row in rows:
        base = next(r for r in rows if r["model"] == row["model"] and r["variant"] == "float32")
        row["size_ratio"] = row["size_mb"] / base["size_mb"]
        row["latency_ratio"] = row["ms_1_thread"] / base["ms_1_thread"]
    return rows


def markdown(rows):
    """The rows as a Markdown table."""
    lines = ["| model | variant | size MB (x float32) | relative max abs diff | top-1 agreement (decisive) | accuracy drop "
             "| batch dependence | ms, 1 thread (x float32) |", "|" + "---|" * 8]
    for r in rows:
        drop = "-" if r["accuracy_drop"] is None else f"{r['accuracy_drop']:.4f}"
        lines.append(f"| {r['model']} | {r['variant']} | {r['size_mb']:.3f} ({r['size_ratio']:.2f}) | "
                     f"{r['relative_max_abs_diff']:.2e} | {r['top1_agreement']:.4f} ({r['decisive_top1_agreement']:.4f}) | "
                     f"{drop} | {r['batch_dependence']:.1e} | {r['ms_1_thread']:.3f} ({r['latency_ratio']:.2f}) |")
    return "\n".join(lines)


def _positive(text):
    """argparse type: a positive int."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int. Received: {text}")
    return value


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.onnx_int8", description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="trained,ViTTi16", help="comma list of trained or variant names")
    parser.add_argument("--rounds", type=_positive, default=5, help="timing rounds, files in alternation")
    parser.add_argument("--runs", type=_positive, default=20, help="calls per file and round")
    args = parser.parse_args(argv)
    print(markdown(measure([m.strip() for m in args.models.split(",") if m.strip()], args.rounds, args.runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
