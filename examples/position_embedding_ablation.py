"""The paper's position-embedding ablation (Appendix D.4, Table 8) and resolution experiment (Sec. 3.2) on digits.

    python examples/position_embedding_ablation.py --seeds 3 --epochs 25 --output-dir runs/position_embedding_ablation

Part 1 trains `keras-vit-train`'s demo configuration (16 px, patch 4, hidden
128, 4 layers, 4 heads, MLP 512; AdamW 2e-3, weight decay 0.05, 6% warm-up,
cosine, "affine" augmentation, XLA) on scikit-learn's digits once per
position embedding ("learned", "learned_2d", "sincos_2d", "none"), with the
same seeds, recipe and epochs, and measures top-1 accuracy on the fixed
held-out split (360 images, `keras_vit.data.digits("validation")`).

Part 2 takes the "learned" model of the first seed (trained at 16 px, a 4x4
patch grid) and measures held-out accuracy at 16, 24 and 32 px:
  - runtime interpolation: the same weights in a model of any resolution
    (`keras_vit.resize(model, (None, None, 3))`: input `(None, None, 3)`, the
    4x4 table kept), whose table is resampled to each input's grid at call
    time, no fine-tuning;
  - resized + fine-tuned at 32 px: `keras_vit.resize(model, (32, 32, 3))`,
    then `--finetune-epochs` of the paper's fine-tuning recipe (SGD, momentum
    0.9, no weight decay, 6% warm-up + cosine, clipping at 1), evaluated the
    same way (its table has an 8x8 grid);
  - control, fine-tuned at 16 px: the same fine-tuning at the training size,
    so that the extra epochs alone are not taken for the gain of resolution.
The digits are 8x8 scans, so every size here is an upsampling of the same
pixels: more patches, no new detail.

Epochs default to the demo's 100; the README's figures used --epochs 25 (time).
Writes ablation.json (every figure, the configuration, wall times) and
ablation.md (the two tables, also printed) to --output-dir.
"""

import argparse
import json
import os
import time

import keras
import numpy as np

import keras_vit
from keras_vit import data, training
from keras_vit.common import files as _files
from keras_vit import train as train_cli
from keras_vit.layers.position_embedding import POSITION_EMBEDDINGS

EVAL_SIZES = (16, 24, 32)
FINETUNE_SIZE = 32
RUNTIME = "runtime interpolation (no fine-tuning)"
FINETUNED = f"resized + fine-tuned at {FINETUNE_SIZE} px"
CONTROL = "fine-tuned at 16 px (control)"


def _heldout(image_size):
    """The held-out digits at `image_size` px: images (360, size, size, 3) in [-1, 1], labels (360,)."""
    batches = list(data.digits("validation", image_size=image_size, batch_size=512))
    return np.concatenate([x for x, _ in batches]), np.concatenate([y for _, y in batches])


def _accuracy(model, image_size):
    images, labels = _heldout(image_size)
    logits = model.predict(images, batch_size=128, verbose=0)
    return float(np.mean(np.argmax(logits, axis=-1) == labels))


def _fit(model, args, image_size, seed, epochs, optimizer, learning_rate, weight_decay):
    """Trains `model` on the training digits at `image_size` with the recipe given; returns the wall time in s."""
    train = data.digits("train", image_size=image_size, batch_size=args.batch_size, augment="affine", seed=seed)
    steps = args.steps_per_epoch or int(train.cardinality())
    training.compile_model(model, total_steps=epochs * steps, optimizer=optimizer, learning_rate=learning_rate,
                           warmup_steps=int(args.warmup_fraction * epochs * steps), weight_decay=weight_decay,
                           jit_compile=args.xla)
    start = time.perf_counter()
    # As keras-vit-train: one pass over the shuffled split per epoch (--steps-per-epoch: a part of a repeated one).
    source = train if args.steps_per_epoch is None else train.repeat()
    model.fit(source, epochs=epochs, steps_per_epoch=args.steps_per_epoch, verbose=0, shuffle=False)
    return time.perf_counter() - start


def _summary(values):
    values = np.asarray(values, dtype="float64")
    return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else None,
            "min": float(values.min()), "max": float(values.max())}


def part1(args, architecture, image_size):
    """Trains one model per position embedding and seed; returns (results by kind, the first seed's 'learned' model)."""
    results, kept = {}, None
    for kind in POSITION_EMBEDDINGS:
        accuracies, times = [], []
        for seed in range(args.seeds):
            keras.utils.set_random_seed(seed)
            model = keras_vit.VisionTransformer(**architecture, input_shape=(image_size, image_size, 3), classes=10,
                                                classifier_activation=None, position_embedding=kind,
                                                name=f"vit_digits_{kind}")
            times.append(_fit(model, args, image_size, seed, args.epochs, "adamw", args.learning_rate,
                              args.weight_decay))
            accuracies.append(_accuracy(model, image_size))
            print(f"{kind:>10} seed {seed}: held-out accuracy {accuracies[-1]:.4f} ({times[-1]:.0f} s)", flush=True)
            if kind == "learned" and seed == 0:
                kept = model
        results[kind] = {"accuracy": accuracies, **_summary(accuracies), "parameters": int(model.count_params()),
                         "train_wall_time_s": times}
    return results, kept


def part2(args, model, image_size):
    """The resolution experiment on the trained 16-px 'learned' model; returns its results."""
    any_size = keras_vit.resize(model, (None, None, 3))  # keeps the 4x4 table, resamples it at call time
    images, _ = _heldout(image_size)
    # At the training size the any-resolution model must be the trained model itself (no resampling happens).
    same = float(np.max(np.abs(any_size.predict(images, verbose=0) - model.predict(images, verbose=0))))

    finetuned = keras_vit.resize(model, (FINETUNE_SIZE, FINETUNE_SIZE, 3))  # table resampled once to 8x8
    control = keras_vit.resize(model, (image_size, image_size, 3))  # a copy: same size, same weights
    times = {}
    for row, copy, size in ((FINETUNED, finetuned, FINETUNE_SIZE), (CONTROL, control, image_size)):
        keras.utils.set_random_seed(0)
        times[row] = _fit(copy, args, size, 0, args.finetune_epochs, "sgd", args.finetune_learning_rate, 0.0)

    rows = {RUNTIME: any_size, FINETUNED: keras_vit.resize(finetuned, (None, None, 3)),
            CONTROL: keras_vit.resize(control, (None, None, 3))}
    return {
        "train_size": image_size,
        "eval_sizes": list(EVAL_SIZES),
        "accuracy": {row: {str(s): _accuracy(m, s) for s in EVAL_SIZES} for row, m in rows.items()},
        "finetune_wall_time_s": times,
        "max_abs_logit_diff_any_resolution_vs_trained_at_16px": same,
    }


def tables(results):
    """The two markdown tables of `results` (the dict written to ablation.json)."""
    seeds = results["configuration"]["seeds"]
    spread = f"mean ± std over {seeds} seeds (min-max)" if seeds > 1 else "1 seed"
    lines = [f"| position embedding | held-out accuracy ({spread}) | parameters |", "|---|---|---|"]
    for kind, r in results["position_embeddings"].items():
        figure = f"{r['mean']:.4f}"
        if seeds > 1:
            figure += f" ± {r['std']:.4f} ({r['min']:.4f}-{r['max']:.4f})"
        lines.append(f"| {kind} | {figure} | {r['parameters']:,} |")
    part2 = results["resolution"]
    sizes = part2["eval_sizes"]
    lines += ["", "| model (trained at 16 px, learned) | " + " | ".join(f"{s} px" for s in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for row, by_size in part2["accuracy"].items():
        lines.append(f"| {row} | " + " | ".join(f"{by_size[str(s)]:.4f}" for s in sizes) + " |")
    return "\n".join(lines) + "\n"


def _write(path, text):
    with _files.staged(path, overwrite=True) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def main(argv=None):
    demo = train_cli.build_parser().parse_args([])  # keras-vit-train's defaults: the demo configuration
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 per position embedding (default 1)")
    parser.add_argument("--epochs", type=int, default=demo.epochs, help=f"training epochs (default {demo.epochs})")
    parser.add_argument("--finetune-epochs", type=int, default=10, help="fine-tuning epochs in part 2 (default 10)")
    parser.add_argument("--finetune-learning-rate", type=float, default=0.01, help="SGD, default 0.01")
    parser.add_argument("--steps-per-epoch", type=int, default=None, help="default: the whole training split")
    for name, value in train_cli.DEFAULTS.items():
        if name != "image_size":
            parser.add_argument("--" + name.replace("_", "-"), type=int, default=value, help=f"default {value}")
    parser.add_argument("--no-xla", dest="xla", action="store_false",
                        help="train without XLA (the recipe compiles with it; without, tiny smoke runs start faster)")
    parser.add_argument("--output-dir", default="runs/position_embedding_ablation")
    args = parser.parse_args(argv)
    for name in ("seeds", "epochs", "finetune_epochs", "steps_per_epoch"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1. Received: {value}")
    if args.finetune_learning_rate <= 0:
        parser.error(f"--finetune-learning-rate must be > 0. Received: {args.finetune_learning_rate}")
    args.batch_size, args.learning_rate, args.weight_decay = demo.batch_size, demo.learning_rate, demo.weight_decay
    args.warmup_fraction = 0.06  # keras-vit-train's default warm-up: 6% of the run

    image_size = train_cli.DEFAULTS["image_size"]
    architecture = {k: getattr(args, k) for k in train_cli.DEFAULTS if k != "image_size"}
    start = time.perf_counter()
    results = {"configuration": {
        **architecture, "image_size": image_size, "seeds": args.seeds, "epochs": args.epochs,
        "steps_per_epoch": args.steps_per_epoch, "batch_size": args.batch_size, "optimizer": "adamw",
        "learning_rate": args.learning_rate, "weight_decay": args.weight_decay, "warmup_fraction": args.warmup_fraction,
        "augment": "affine", "finetune_epochs": args.finetune_epochs, "finetune_optimizer": "sgd",
        "finetune_learning_rate": args.finetune_learning_rate, "jit_compile": args.xla,
        "heldout_images": len(data.load_digits()[1][1]),
    }}
    results["position_embeddings"], learned = part1(args, architecture, image_size)
    results["resolution"] = part2(args, learned, image_size)
    results["wall_time_s"] = time.perf_counter() - start

    table = tables(results)
    print(table)
    _write(os.path.join(args.output_dir, "ablation.json"), json.dumps(results, indent=2) + "\n")
    _write(os.path.join(args.output_dir, "ablation.md"), table)
    return results


if __name__ == "__main__":
    main()
