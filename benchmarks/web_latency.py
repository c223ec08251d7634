"""Batch-1 latency in the browser against LiteRT and onnxruntime in Python (issue 31, item 4).

    python -m benchmarks.web_latency [--models demo,ti] [--demo-model runs/demo/model.keras] [--rounds 5 --runs 20]

Two float32 files per model, exported without verification (speed does not depend on the weights): a `.tflite`
(batch 1, metadata) and an `.onnx` (dynamic batch, fed one image):
- "demo": `make demo`'s model (`--demo-model`, default runs/demo/model.keras; where it is absent, its
  architecture from `keras-vit-train`'s defaults, 16 px, patch 4, hidden 128, 4 layers, seeded);
- "ti": ViT-Ti/16 at 224 px, 1000 classes, seeded.
Runtimes, each file fed the same seeded image: LiteRT (`ai_edge_litert`, XNNPACK) and onnxruntime's CPU
provider in this process on 1 and 2 threads; in headless Chromium (`export.web_check.Browser`), MediaPipe
Tasks for Web's `ImageClassifier` (its WASM build, one thread) and onnxruntime-web (WASM, SIMD, 1 and 2
threads: one page per thread count, as onnxruntime-web reads the count once). A figure is the median over
`--rounds` rounds of the median of `--runs` calls after warm-up calls; the runtimes take turns within a round.
Prints a markdown table and the CPU (`benchmarks.machine.cpu`).
"""

import argparse
import os
import statistics

import numpy as np

from benchmarks.machine import cpu
from benchmarks.timing import interleaved_ms

MODELS = ("demo", "ti")


def build(name, demo_model):
    """The Keras model of `name` ("demo" or "ti"), and where it came from."""
    import keras

    import keras_vit
    from keras_vit.cli.args import DEFAULTS

    if name == "demo" and os.path.exists(demo_model):
        return keras.saving.load_model(demo_model), demo_model
    keras.utils.set_random_seed(0)
    if name == "demo":
        size = DEFAULTS["image_size"]
        config = {k: v for k, v in DEFAULTS.items() if k != "image_size"}
        return (keras_vit.VisionTransformer(**config, input_shape=(size, size, 3), classes=10),
                "make demo's architecture, seeded (runs/demo/model.keras absent)")
    return keras_vit.ViTTi16(weights=None), "ViT-Ti/16, 224 px, seeded"


def export(model, folder, name):
    """`(tflite path, onnx path)`: the float32 files of `model`, unverified."""
    from export.onnx import export_onnx
    from export.tflite import export_tflite

    classes = int(model.output_shape[-1])
    tflite = export_tflite(model, os.path.join(folder, f"{name}.tflite"), overwrite=True, verify=False,
                           metadata={"labels": [str(i) for i in range(classes)]})
    onnx = export_onnx(model, os.path.join(folder, f"{name}.onnx"), overwrite=True, verify=False)
    return tflite, onnx


def _python_calls(tflite, onnx):
    """`{(runtime, threads): call}` for LiteRT and onnxruntime in this process, each on `benchmarks.edge.runner`'s
    seeded batch-1 image (the image `measure` gives the browser)."""
    from benchmarks.edge import runner

    calls = {}
    for threads in (1, 2):
        calls["LiteRT (Python, XNNPACK)", threads] = runner("tflite", tflite, threads)[0]
        calls["onnxruntime (Python)", threads] = runner("onnx", onnx, threads)[0]
    return calls


def measure(models, demo_model, folder, rounds, runs, progress=print):
    """Rows `{model, source, runtime, file, threads, ms}` of every model and runtime."""
    from export.mediapipe_check import to_frames
    from export.web_check import Browser

    os.makedirs(folder, exist_ok=True)
    rows = []
    for name in models:
        model, source = build(name, demo_model)
        tflite, onnx = export(model, folder, name)
        shape = tuple(model.input_shape[1:])
        image = np.random.default_rng(0).uniform(-1, 1, (1, *shape)).astype("float32")  # as benchmarks.edge.runner's
        calls = _python_calls(tflite, onnx)
        times = {key: [] for key in [*calls, ("MediaPipe Tasks for Web (WASM)", 1), ("onnxruntime-web (WASM)", 1),
                                     ("onnxruntime-web (WASM)", 2)]}
        with Browser() as browser:
            pages = {1: browser.page, 2: browser.new_page()}
            for r in range(rounds):
                progress(f"  {name}: round {r + 1}/{rounds}")
                for key, ms in interleaved_ms(calls, 1, runs, progress=lambda line: None).items():
                    times[key].append(ms)
                times["MediaPipe Tasks for Web (WASM)", 1].append(statistics.median(
                    browser.mediapipe_scores(tflite, to_frames(image), int(model.output_shape[-1]), runs + 2)[1][2:]))
                for threads, page in pages.items():
                    times["onnxruntime-web (WASM)", threads].append(
                        statistics.median(browser.onnx_outputs(onnx, image, threads, runs + 2, page=page)[1][2:]))
        for (runtime, threads), values in times.items():
            rows.append({"model": name, "source": source, "runtime": runtime, "threads": threads,
                         "file": os.path.basename(tflite if "LiteRT" in runtime or "MediaPipe" in runtime else onnx),
                         "ms": statistics.median(values)})
    return rows


def table(rows):
    """The rows as a markdown table, each model's rows with their ratio to LiteRT on one thread."""
    lines = ["| model | runtime | file | threads | ms, batch 1 | vs LiteRT, 1 thread |", "|---|---|---|---|---|---|"]
    for row in rows:
        base = next(r["ms"] for r in rows if r["model"] == row["model"] and r["runtime"].startswith("LiteRT")
                    and r["threads"] == 1)
        lines.append(f"| {row['model']} | {row['runtime']} | {row['file']} | {row['threads']} | {row['ms']:.2f} | "
                     f"{row['ms'] / base:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="demo,ti", help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--demo-model", default="runs/demo/model.keras")
    parser.add_argument("--folder", default="/tmp/web_latency", help="where the files are written")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    if not models or any(m not in MODELS for m in models):
        parser.error(f"--models must be a comma list of {', '.join(MODELS)}. Received: {args.models!r}")
    if args.rounds < 1 or args.runs < 1:
        parser.error(f"--rounds and --runs must be >= 1. Received: {args.rounds}, {args.runs}")
    rows = measure(models, args.demo_model, args.folder, args.rounds, args.runs)
    print(f"CPU: {cpu()}")
    for source in dict.fromkeys(r["source"] for r in rows):
        print(f"- {source}")
    print(table(rows))


if __name__ == "__main__":
    main()
