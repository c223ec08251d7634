"""Where the time of a batch-1 forward pass goes: fixed cost versus cost per encoder block.

    .venv/bin/python -m benchmarks.profile_depth

Times keras_vit (XLA and not), keras-hub and Hugging Face PyTorch ViTs of width 192 (Ti) with
0, 4 and 12 encoder blocks at 224 px, batch 1, and fits time = fixed + blocks x per_block. The
fixed part is everything outside the encoder (patch embedding, head, dispatch, runtime
overhead); the per-block part is the attention and MLP compute. Prints a Markdown table.
"""

import argparse
import sys

import numpy as np

from benchmarks.peers import torch_model
from benchmarks.run import keras_models
from benchmarks.timing import median_seconds

DEPTHS = (0, 4, 12)


def _time(call, steps=30, warmup=5):
    return 1000 * median_seconds(call, steps, warmup)


def main(argv=None):
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)  # --help; no options
    import tensorflow as tf
    import torch

    x = np.random.default_rng(0).uniform(-1, 1, (1, 224, 224, 3)).astype("float32")
    tx = tf.constant(x)
    px = torch.from_numpy(x.transpose(0, 3, 1, 2).copy())
    ms = {}
    for depth in DEPTHS:
        config = (192, max(depth, 1), 3, 768, 16)
        models = keras_models(f"d{depth}", config, 224)
        for name, model in models.items():
            if depth == 0:  # no encoder block: embed, norm and head only
                import keras

                cut = model.get_layer("patch_encoder").output if name == "keras_vit" else None
                if cut is None:
                    continue
                model = keras.Model(model.inputs, model.get_layer("predictions")(
                    model.get_layer("pooling")(model.get_layer("encoder_norm")(cut))))
            for jit in ((True, False) if name == "keras_vit" else (True,)):
                f = tf.function(lambda v, m=model: m(v, training=False), jit_compile=jit)
                label = f"{name} (XLA {'on' if jit else 'off'})"
                ms.setdefault(label, {})[depth] = _time(lambda: f(tx).numpy())
        torch.set_num_threads(2)
        tm = torch_model(config, 224).eval()
        if depth == 0:  # drop the one block built
            if hasattr(tm.vit, "layers"):
                tm.vit.layers = torch.nn.ModuleList()
            else:
                tm.vit.encoder.layer = torch.nn.ModuleList()
        with torch.inference_mode():
            ms.setdefault("HF transformers (PyTorch)", {})[depth] = _time(lambda: tm(pixel_values=px))
    print("| implementation | " + " | ".join(f"{d} blocks ms" for d in DEPTHS) + " | fixed ms | per block ms |")
    print("|---|" + "---|" * (len(DEPTHS) + 2))
    for label, by_depth in ms.items():
        depths = sorted(by_depth)
        slope, intercept = np.polyfit(depths, [by_depth[d] for d in depths], 1)
        cells = " | ".join(f"{by_depth[d]:.2f}" if d in by_depth else "–" for d in DEPTHS)
        print(f"| {label} | {cells} | {intercept:.2f} | {slope:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
