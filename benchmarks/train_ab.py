"""keras_vit against keras-hub's ViT, training step for training step, in one process (issue 30, item 2).

    python -m benchmarks.train_ab [--models Ti16] [--batch 8] [--rounds 7 --runs 3] [--xla on,off]

`make bench` times each model in a process of its own, three steps each, and on this shared 2-core machine one
process can run 50% slower than the next. This module takes turns instead: both models, built at random init
(`benchmarks.run._keras_models`: the same configuration, 224 px, 1000 classes, float32 logits), compiled alike
(AdamW 1e-4, `global_clipnorm=1.0`, sparse cross-entropy from logits, `jit_compile` as `--xla` says), each
`train_on_batch` on the same seeded batch; after two warm-up steps (XLA compiles there), `--rounds` rounds call
each model `--runs` times in turn, and a figure is the median over rounds of each round's median (`interleaved_ms`).
Inference (`model(x, training=False)` under `tf.function`, the same `jit_compile`) is timed the same way, so that a
gap can be told to be the forward pass's or the backward pass's. Prints a markdown table and the CPU.
"""

import argparse

import numpy as np

from benchmarks.machine import cpu
from benchmarks.run import SIZES, _keras_models
from benchmarks.timing import interleaved_ms

MODELS = ("keras_vit", "keras-hub")


def measure(name, config, image, batch, rounds, runs, jit, progress=print):
    """`{(model, "train" | "infer"): ms}` for keras_vit and keras-hub of `config` (`SIZES[name]`: hidden size, layers,
    heads, MLP size, patch size) at `image` px and batch `batch`."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    models = _keras_models(name, config, image)
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
    return interleaved_ms(calls, rounds, runs, progress=progress)


def table(results):
    """`results`: `{(name, batch, xla): {(model, kind): ms}}` -> markdown: ms per step and keras_vit's speed ratio."""
    lines = ["| model | batch | XLA | kind | keras_vit ms | keras-hub ms | keras_vit speed / keras-hub |",
             "|---|---|---|---|---|---|---|"]
    for (name, batch, xla), ms in results.items():
        for kind in ("train", "infer"):
            ours, theirs = ms["keras_vit", kind], ms["keras-hub", kind]
            lines.append(f"| {name} | {batch} | {'on' if xla else 'off'} | {kind} | {ours:.1f} | {theirs:.1f} | "
                         f"{theirs / ours:.2f}x |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="Ti16", help=f"comma list of {', '.join(SIZES)} (default Ti16)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--xla", default="on", help="comma list of on, off (default on)")
    args = parser.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    if not names or any(m not in SIZES for m in names):
        parser.error(f"--models must be a comma list of {', '.join(SIZES)}. Received: {args.models!r}")
    xla = [v for v in args.xla.split(",") if v]
    if not xla or any(v not in ("on", "off") for v in xla):
        parser.error(f"--xla must be a comma list of on, off. Received: {args.xla!r}")
    if min(args.batch, args.rounds, args.runs) < 1:
        parser.error(f"--batch, --rounds and --runs must be >= 1. Received: {args.batch}, {args.rounds}, {args.runs}")
    results = {}
    for name in names:
        for setting in xla:
            print(f"{name}, batch {args.batch}, XLA {setting}", flush=True)
            results[name, args.batch, setting == "on"] = measure(name, SIZES[name], 224, args.batch, args.rounds,
                                                                 args.runs, setting == "on")
    print(f"CPU: {cpu()}")
    print(table(results))


if __name__ == "__main__":
    main()
