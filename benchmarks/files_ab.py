"""keras_vit's exported float32 files against Hugging Face's PyTorch ViT, call for call, in one process (issue 30,
item 4's bar: the fastest float32 file at least 1.3x the fastest PyTorch peer at batch 1).

    python -m benchmarks.files_ab [--models Ti16,S16] [--batch 1] [--rounds 7 --runs 5]

`make bench` times the files and the PyTorch peers in separate processes, minutes apart; on this shared 2-core
machine one process can run 50% slower than the next. This module takes turns instead. For each model it builds
keras_vit at random init (`benchmarks.run.keras_models`: 224 px, 1000 classes), writes its float32 `.tflite`
(`export_tflite`, `batch_size=None`) and `model.onnx` (`export_onnx`) from one `ServingGraph`, `verify=False` (the
export tests prove the files' numbers; here only time counts), and builds HF's `ViTForImageClassification` of the
same configuration, eager and under `torch.compile` (`benchmarks.peers.torch_infer_call`). After two warm-up calls
each (XNNPACK packs weights, inductor compiles), `--rounds` rounds call each runtime `--runs` times in turn, and a
figure is the median over rounds of each round's median (`interleaved_ms`). Files: LiteRT (XNNPACK) on 2 threads,
onnxruntime's CPU provider on 2 threads; PyTorch on all cores. Prints a markdown table and the CPU.
"""

import argparse
import os
import tempfile

import numpy as np

from benchmarks.machine import cpu
from benchmarks.peers import torch_infer_call
from benchmarks.run import SIZES, keras_models, litert_runner
from benchmarks.throughput_tables import TORCH_PEERS
from benchmarks.timing import interleaved_ms

FILES = ("TFLite float32 (LiteRT, 2 threads)", "ONNX Runtime (2 threads)")


def measure(name, config, image, batch, rounds, runs, progress=print):
    """`{runtime: ms per call}` for keras_vit's float32 files (`FILES`) and HF's ViT (`TORCH_PEERS`' names) of
    `config` (`SIZES[name]`) at `image` px and batch `batch`, float32 inputs uniform in [-1, 1]."""
    import keras
    import onnxruntime as ort

    from export import export_onnx, export_tflite
    from export.signature import ServingGraph

    keras.utils.set_random_seed(0)
    model = keras_models(name, config, image, only="keras_vit")["keras_vit"]
    x = np.random.default_rng(0).uniform(-1, 1, (batch, image, image, 3)).astype("float32")
    with tempfile.TemporaryDirectory() as tmp:
        with ServingGraph(model) as graph:
            tflite = export_tflite(graph, os.path.join(tmp, "model.tflite"), batch_size=None, verify=False)
            onnx = export_onnx(graph, os.path.join(tmp, "model.onnx"), verify=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        session = ort.InferenceSession(onnx, options, providers=["CPUExecutionProvider"])
        feed = {session.get_inputs()[0].name: x}
        calls = {FILES[0]: litert_runner(tflite, x, 2), FILES[1]: lambda: session.run(None, feed)}
        for impl, label in TORCH_PEERS.items():
            calls[label] = torch_infer_call(config, image, batch, compiled=impl == "torch_compile")
        return interleaved_ms(calls, rounds, runs, progress=progress)


def table(results):
    """`results`: `{(name, batch): {runtime: ms}}` -> markdown: ms per call and the fastest file's speed over the
    fastest PyTorch peer's."""
    peers = list(TORCH_PEERS.values())
    lines = ["| model | batch | " + " | ".join(f"{k} ms" for k in (*FILES, *peers)) +
             " | fastest file / fastest PyTorch peer |",
             "|---|---|" + "---|" * (len(FILES) + len(peers)) + "---|"]
    for (name, batch), ms in results.items():
        best_file = min(ms[f] for f in FILES)
        best_peer = min(ms[p] for p in peers)
        cells = " | ".join(f"{ms[k]:.1f}" for k in (*FILES, *peers))
        lines.append(f"| {name} | {batch} | {cells} | {best_peer / best_file:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="Ti16,S16", help=f"comma list of {', '.join(SIZES)} (default Ti16,S16)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    if not names or any(m not in SIZES for m in names):
        parser.error(f"--models must be a comma list of {', '.join(SIZES)}. Received: {args.models!r}")
    if min(args.batch, args.rounds, args.runs) < 1:
        parser.error(f"--batch, --rounds and --runs must be >= 1. Received: {args.batch}, {args.rounds}, {args.runs}")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    results = {}
    for name in names:
        print(f"{name}, batch {args.batch}", flush=True)
        results[name, args.batch] = measure(name, SIZES[name], 224, args.batch, args.rounds, args.runs)
    print(f"CPU: {cpu()}")
    print(table(results))


if __name__ == "__main__":
    main()
