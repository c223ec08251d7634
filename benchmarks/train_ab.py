"""keras_vit against keras-hub's ViT (and HF's), training step for training step, in one process (issue 30, item 2).

    python -m benchmarks.train_ab [--models Ti16] [--batch 8] [--rounds 7 --runs 3] [--xla on,off]
                                  [--precision float32,mixed_bfloat16] [--torch]

`make bench` times each model in a process of its own, three steps each, and on this shared 2-core machine one
process can run 50% slower than the next. This module takes turns instead: both models, built at random init
(`benchmarks.run.keras_models`: the same configuration, 224 px, 1000 classes, float32 logits), compiled alike
(AdamW 1e-4, `global_clipnorm=1.0`, sparse cross-entropy from logits, `jit_compile` as `--xla` says), each
`train_on_batch` on the same seeded batch; after two warm-up steps (XLA compiles there), `--rounds` rounds call
each model `--runs` times in turn, and a figure is the median over rounds of each round's median (`interleaved_ms`).
Inference (`model(x, training=False)` under `tf.function`, the same `jit_compile`) is timed the same way, so that a
gap can be told to be the forward pass's or the backward pass's. `--precision mixed_bfloat16` builds both models
under that Keras dtype policy (bfloat16 compute, float32 variables and logits), as `make bench`'s bfloat16 rows do.
`--torch` takes Hugging Face's PyTorch ViT into the same turns, eager and under `torch.compile`, as `make bench`
runs it (`benchmarks.peers`: an AdamW step with clipping, bfloat16 through `torch.autocast`; inference in float32
under `torch.inference_mode`, so HF's inference is timed in float32 rows only: `make bench` has no bfloat16 inference
row). Prints a markdown table and the CPU.
"""

import argparse

import numpy as np

from benchmarks.machine import cpu
from benchmarks.peers import torch_infer_call, torch_train_step
from benchmarks.run import SIZES, keras_models
from benchmarks.throughput_tables import TORCH_PEERS
from benchmarks.timing import interleaved_ms

MODELS = ("keras_vit", "keras-hub")


def measure(name, config, image, batch, rounds, runs, jit, progress=print, precision="float32", with_torch=False):
    """`{(model, "train" | "infer"): ms}` for keras_vit and keras-hub of `config` (`SIZES[name]`: hidden size, layers,
    heads, MLP size, patch size) at `image` px and batch `batch`, built under the Keras dtype policy `precision`
    ("float32" or "mixed_bfloat16"; the global policy is float32 again afterwards); with `with_torch`, also HF's ViT
    eager and under `torch.compile` (keys `TORCH_PEERS`' names; their "infer" in float32 only)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy(precision)
    try:
        models = keras_models(name, config, image)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    x = np.random.default_rng(0).uniform(-1, 1, (batch, image, image, 3)).astype("float32")
    y = np.arange(batch) % 1000
    calls = {}
    for key in MODELS:
        model = models[key]
        model.compile(optimizer=keras.optimizers.AdamW(1e-4, global_clipnorm=1.0),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit)
        forward = tf.function(lambda v, m=model: m(v, training=False), jit_compile=jit)
        calls[key, "train"] = lambda m=model: m.train_on_batch(x, y)
        calls[key, "infer"] = lambda f=forward: f(tf.constant(x)).numpy()
    if with_torch:
        for impl, label in TORCH_PEERS.items():
            compiled = impl == "torch_compile"
            calls[label, "train"] = torch_train_step(config, image, batch, precision != "float32", compiled)
            if precision == "float32":
                calls[label, "infer"] = torch_infer_call(config, image, batch, compiled)
    return interleaved_ms(calls, rounds, runs, progress=progress)


def table(results):
    """`results`: `{(name, batch, xla, precision): {(model, kind): ms}}` -> markdown: ms per step of each model and
    keras_vit's speed against the fastest other model of the row."""
    others = list(dict.fromkeys(model for ms in results.values() for model, _ in ms if model != "keras_vit"))
    lines = ["| model | precision | batch | XLA | kind | keras_vit ms | " + " | ".join(f"{o} ms" for o in others) +
             " | keras_vit speed / fastest other |",
             "|---|---|---|---|---|---|" + "---|" * len(others) + "---|"]
    for (name, batch, xla, precision), ms in results.items():
        for kind in ("train", "infer"):
            ours = ms["keras_vit", kind]
            theirs = [ms.get((o, kind)) for o in others]
            fastest = min(t for t in theirs if t is not None)
            cells = " | ".join("–" if t is None else f"{t:.1f}" for t in theirs)
            lines.append(f"| {name} | {precision} | {batch} | {'on' if xla else 'off'} | {kind} | {ours:.1f} | "
                         f"{cells} | {fastest / ours:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="Ti16", help=f"comma list of {', '.join(SIZES)} (default Ti16)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--xla", default="on", help="comma list of on, off (default on)")
    parser.add_argument("--precision", default="float32",
                        help="comma list of float32, mixed_bfloat16 (default float32)")
    parser.add_argument("--torch", action="store_true",
                        help="also HF's PyTorch ViT, eager and under torch.compile, in the same turns")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    if not names or any(m not in SIZES for m in names):
        parser.error(f"--models must be a comma list of {', '.join(SIZES)}. Received: {args.models!r}")
    xla = [v for v in args.xla.split(",") if v]
    if not xla or any(v not in ("on", "off") for v in xla):
        parser.error(f"--xla must be a comma list of on, off. Received: {args.xla!r}")
    precisions = [v for v in args.precision.split(",") if v]
    if not precisions or any(v not in ("float32", "mixed_bfloat16") for v in precisions):
        parser.error(f"--precision must be a comma list of float32, mixed_bfloat16. Received: {args.precision!r}")
    if min(args.batch, args.rounds, args.runs) < 1:
        parser.error(f"--batch, --rounds and --runs must be >= 1. Received: {args.batch}, {args.rounds}, {args.runs}")
    results = {}
    for name in names:
        for precision in precisions:
            for setting in xla:
                print(f"{name}, {precision}, batch {args.batch}, XLA {setting}", flush=True)
                results[name, args.batch, setting == "on", precision] = measure(
                    name, SIZES[name], 224, args.batch, args.rounds, args.runs, setting == "on", precision=precision,
                    with_torch=args.torch)
    print(f"CPU: {cpu()}")
    print(table(results))


if __name__ == "__main__":
    main()
