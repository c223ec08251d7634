"""How fast each engine multiplies the matrices a ViT encoder block is made of.

    .venv/bin/python -m benchmarks.profile_matmul            # Ti/16, S/16, B/16 at 224 px
    .venv/bin/python -m benchmarks.profile_matmul --dtype bfloat16
    .venv/bin/python -m benchmarks.profile_matmul --quick    # a smoke run

A ViT block is four dense products per token (query/key/value, attention output, the MLP's two
layers; Eq. 2-3 of the paper) plus the two attention products. This times the dense products
with the shapes of ViT-Ti/16, S/16 and B/16 at batch 1 and 8 (197 tokens an image) in TensorFlow
with XLA (`jit_compile=True`, what keras_vit trains with), TensorFlow without XLA (oneDNN
kernels) and PyTorch. Each figure chains `--chain` products in one call so that dispatch cost
does not count, and the three engines take turns over `--rounds` rounds (median) so that a busy
neighbour on the machine slows all of them alike. Prints a Markdown table of GFLOP/s.
"""

import argparse
import os
import sys

import numpy as np

from benchmarks.timing import wall_times

TOKENS = 197  # 14 x 14 patches + the class token at 224 px, patch 16
WIDTHS = {"Ti16": (192, 768), "S16": (384, 1536), "B16": (768, 3072)}  # hidden_size, mlp_dim


def shapes(widths, batches, tokens=TOKENS):
    """(label, M, K, N) of the dense products of one encoder block: tokens x in-features x out-features."""
    out = []
    for name, (hidden, mlp) in widths.items():
        for batch in batches:
            m = batch * tokens
            out += [(f"{name} b{batch} qkv", m, hidden, 3 * hidden),
                    (f"{name} b{batch} mlp_1", m, hidden, mlp),
                    (f"{name} b{batch} mlp_2", m, mlp, hidden)]
    return out


def _engines(m, k, n, chain, dtype="float32"):
    """{engine: callable} each computing `chain` dependent products x @ A @ B (A: k x n, B: n x k) in `dtype`
    ("float32" or "bfloat16"); each returns the result as a float32 NumPy array."""
    import tensorflow as tf
    import torch

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (m, k)).astype("float32")
    a = (rng.standard_normal((k, n)) / np.sqrt(k)).astype("float32")  # keeps the scale along the chain
    b = (rng.standard_normal((n, k)) / np.sqrt(n)).astype("float32")

    def tf_chain(x, a, b):
        for _ in range(chain // 2):
            x = tf.matmul(tf.matmul(x, a), b)
        return x

    tx, ta, tb = (tf.cast(tf.constant(v), dtype) for v in (x, a, b))
    xla = tf.function(tf_chain, jit_compile=True)
    plain = tf.function(tf_chain, jit_compile=False)
    px, pa, pb = (torch.from_numpy(v).to(getattr(torch, dtype)) for v in (x, a, b))

    def torch_chain():
        y = px
        for _ in range(chain // 2):
            y = (y @ pa) @ pb
        return y

    return {"TensorFlow+XLA": lambda: tf.cast(xla(tx, ta, tb), "float32").numpy(),
            "TensorFlow (oneDNN)": lambda: tf.cast(plain(tx, ta, tb), "float32").numpy(),
            "PyTorch": lambda: torch_chain().float().numpy()}


def profile(cases, chain, rounds, dtype="float32"):
    """Returns [(label, M, K, N, {engine: GFLOP/s})]; the FLOPs of a chain count both directions' products."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    results = []
    for label, m, k, n in cases:
        engines = _engines(m, k, n, chain, dtype)
        times = {name: [] for name in engines}
        for run in engines.values():  # compile and warm up
            wall_times(run, 0, warmup=2)
        for _ in range(rounds):  # the engines take turns
            for name, run in engines.items():
                times[name] += wall_times(run, 1)
        flops = 2.0 * m * k * n * (chain // 2) * 2
        results.append((label, m, k, n, {name: flops / np.median(t) / 1e9 for name, t in times.items()}))
    return results


def markdown(results):
    names = list(results[0][4])
    lines = ["| product | M x K x N | " + " | ".join(f"{name} GFLOP/s" for name in names) + " | XLA / PyTorch |",
             "|---|---|" + "---|" * (len(names) + 1)]
    for label, m, k, n, rates in results:
        cells = " | ".join(f"{rates[name]:.0f}" for name in names)
        lines.append(f"| {label} | {m} x {k} x {n} | {cells} | {rates['TensorFlow+XLA'] / rates['PyTorch']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="Ti16,S16,B16", help=f"comma list of {', '.join(WIDTHS)}")
    parser.add_argument("--chain", type=int, default=20, help="products per timed call (even, >= 2)")
    parser.add_argument("--rounds", type=int, default=7, help="timed calls per engine (median)")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--quick", action="store_true", help="one small shape, few rounds: a smoke run")
    args = parser.parse_args(argv)
    if args.chain < 2 or args.chain % 2:
        parser.error(f"--chain must be an even number >= 2. Received: {args.chain}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1. Received: {args.rounds}")
    unknown = [m for m in args.models.split(",") if m not in WIDTHS]
    if unknown:
        parser.error(f"--models: unknown {', '.join(unknown)} (choose from {', '.join(WIDTHS)})")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if args.quick:
        cases, chain, rounds = [("tiny", 64, 32, 96)], 2, 2
    else:
        cases = shapes({m: WIDTHS[m] for m in args.models.split(",")}, (1, 8))
        chain, rounds = args.chain, args.rounds
    results = profile(cases, chain, rounds, args.dtype)
    print(markdown(results))
    return results


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
