"""Self-supervised pre-training by masked patch prediction (paper Sec. 4.6) against training from scratch, on digits.

    python examples/masked_patch_pretraining.py --seeds 3 --pretrain-epochs 30 --finetune-epochs 6 \\
        --pretrain-learning-rate 1e-3 --output-dir runs/masked_patch_pretraining

Per seed s (0..--seeds - 1):
  1. `keras-vit-pretrain` (in this process, through its `main`) pre-trains
     keras-vit-train's demo configuration (16 px, patch 4, hidden 128, 4
     layers, 4 heads, MLP 512) on all 1,437 training images of `digits`
     without their labels: 50% of the patches corrupted (80% [mask], 10%
     another patch, 10% kept), each corrupted patch's 3-bit mean colour
     predicted (--target, --corruption-rate); Adam, 6% warm-up + cosine,
     --pretrain-learning-rate (default 1e-3: the paper's 2e-4 is for batch
     4096); `--seed s`. It writes backbone.keras.
  2. For each labels fraction (--labels-fractions, default 10% and 100%),
     `keras-vit-train --labels-fraction F --seed s` (a stratified, seeded
     subset; the same images for both runs of a seed) trains the same
     configuration twice with keras-vit-train's recipe (AdamW 2e-3, weight
     decay 0.05, 6% warm-up, cosine, "affine" augmentation, batch 64):
       - "pre-trained": `--init-from backbone.keras` (a zero-initialised head
         on the pre-trained encoder);
       - "from scratch": the same architecture from random initialisation.
     Both runs of a fraction take the same number of optimiser steps:
     --finetune-epochs passes over the full training split (23 steps of 64
     each); a smaller subset is passed over more often so that every
     fraction gets about the same number of steps (`finetune_steps` in the
     JSON).
  3. Held-out accuracy on the fixed 360-image split (`digits("validation")`)
     from each run's metrics.json.

It also records, for every fine-tuned model, the mean absolute difference of
its encoder weights from the pre-trained backbone's (`distance_to_backbone`:
small for the pre-trained runs, which started there), and writes a figure
(masked_patch_prediction.png, seed 0's pre-training model on 8 held-out
images: the corrupted input, the predicted and the true mean colours).

Writes to --output-dir: masked_patch_pretraining.json (every figure, the
configuration, the wall times), masked_patch_pretraining.md (the table, also
printed), masked_patch_prediction.png and one folder per run
(seed_S/pretrain, seed_S/{pretrained,scratch}_FRACTION with each CLI's files).
"""

import argparse
import json
import os
import time

import numpy as np

from keras_vit import data, inspect, pretraining
from keras_vit.common import files as _files
from keras_vit import pretrain as pretrain_cli
from keras_vit import train as train_cli

INITS = ("scratch", "pretrained")
FIGURE_IMAGES = 8


def _summary(values):
    values = np.asarray(values, dtype="float64")
    return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else None,
            "min": float(values.min()), "max": float(values.max())}


def _read_json(path):
    with open(path) as f:
        return json.load(f)


def _run_cli(main, argv):
    """Runs a keras_vit CLI's `main(argv)` in this process; raises RuntimeError naming the command if it fails."""
    try:
        status = main(argv)
    except SystemExit as e:  # argparse and _cli exit 2 on a bad flag
        status = e.code
    if status != 0:
        raise RuntimeError(f"{main.__module__} {' '.join(argv)} exited with status {status}")


def _architecture_flags(args):
    names = [k for k in train_cli.DEFAULTS if k != "image_size"]
    return [flag for k in names for flag in ("--" + k.replace("_", "-"), str(getattr(args, k)))]


def _common_flags(args, seed, output_dir):
    return ["--seed", str(seed), "--batch-size", str(args.batch_size), "--xla", "on" if args.xla else "off",
            "--output-dir", output_dir, "--overwrite", "--verbose", "0"]


def _steps_per_epoch(num_images, batch_size):
    return -(-num_images // batch_size)  # keras_vit.data keeps the partial last batch


def _distance_to_backbone(model_path, backbone):
    """Mean absolute difference between the encoder weights of a saved model and `backbone`'s, matched by path."""
    import keras

    model = keras.saving.load_model(model_path, compile=False)
    weights = {w.path: np.asarray(w) for w in model.weights}
    missing = [w.path for w in backbone.weights if w.path not in weights]
    if missing:
        raise RuntimeError(f"{model_path} lacks the backbone's weights {missing[:3]}")
    total = sum(float(np.abs(weights[w.path] - np.asarray(w)).sum()) for w in backbone.weights)
    return total / sum(int(np.prod(w.shape)) for w in backbone.weights)


def _figure(args, pretrain_dir, path):
    """Seed 0's pre-training model (backbone + [mask] + head) on the first held-out images; the figure's dict."""
    import keras

    backbone = keras.saving.load_model(os.path.join(pretrain_dir, "backbone.keras"), compile=False)
    model = pretraining.MaskedPatchPrediction(backbone, target=args.target)
    model.load_weights(os.path.join(pretrain_dir, "pretraining.weights.h5"))
    images = next(iter(data.digits("validation", image_size=args.image_size, batch_size=FIGURE_IMAGES)))[0].numpy()
    result = inspect.masked_patch_prediction(model, images, seed=0, corruption_rate=args.corruption_rate)
    inspect.plot_masked_patch_prediction(result, path)
    return result


def _majority_baseline(args):
    """Share of held-out patches in their most common mean-colour class (what always guessing it scores)."""
    images = np.concatenate([x for x, _ in data.digits("validation", image_size=args.image_size, batch_size=512)])
    classes = pretraining.patch_targets(images, args.patch_size).numpy().ravel()
    return float(np.bincount(classes).max() / classes.size)


def pretrain(args, seed, out):
    """keras-vit-pretrain for one seed; returns its metrics (and the folder holding backbone.keras)."""
    argv = ["--dataset", "digits", "--image-size", str(args.image_size), *_architecture_flags(args),
            "--epochs", str(args.pretrain_epochs), "--learning-rate", str(args.pretrain_learning_rate),
            "--target", args.target, "--corruption-rate", str(args.corruption_rate), *_common_flags(args, seed, out)]
    _run_cli(pretrain_cli.main, argv)
    metrics = _read_json(os.path.join(out, "metrics.json"))
    return {"output_dir": out, "loss": metrics["loss"], "mean_color_accuracy": metrics.get("mean_color_accuracy"),
            "train_wall_time_s": metrics["train_wall_time_s"], "epochs": metrics["epochs"]}


def finetune(args, seed, fraction, init, backbone_path, epochs, out):
    """keras-vit-train on a labels fraction from scratch or from the backbone; returns its figures."""
    model_flags = ["--init-from", backbone_path] if init == "pretrained" else [
        "--image-size", str(args.image_size), *_architecture_flags(args)]
    argv = ["--dataset", "digits", "--labels-fraction", str(fraction), *model_flags, "--epochs", str(epochs),
            "--learning-rate", str(args.finetune_learning_rate), *_common_flags(args, seed, out)]
    _run_cli(train_cli.main, argv)
    metrics = _read_json(os.path.join(out, "metrics.json"))
    steps = epochs * _steps_per_epoch(metrics["num_train_images"], args.batch_size)
    return {"output_dir": out, "accuracy": metrics["accuracy"], "loss": metrics["loss"], "epochs": epochs,
            "steps": steps, "num_train_images": metrics["num_train_images"], "init_from": metrics["init_from"],
            "train_wall_time_s": metrics["train_wall_time_s"]}


def experiment(args):
    """Every run of every seed; returns the results dict written to masked_patch_pretraining.json."""
    import keras

    (_, y_train), (_, y_val), _ = data.load_digits()
    full_steps = _steps_per_epoch(len(y_train), args.batch_size)
    budget = args.finetune_epochs * full_steps  # optimiser steps of every fine-tuning run
    epochs = {}
    for fraction in args.labels_fractions:
        subset = len(data.stratified_subset(y_train, fraction, seed=0))  # per-class rounding: the same for any seed
        epochs[fraction] = max(1, round(budget / _steps_per_epoch(subset, args.batch_size)))
    results = {"configuration": {
        **{k: getattr(args, k) for k in train_cli.DEFAULTS}, "seeds": args.seeds, "target": args.target,
        "corruption_rate": args.corruption_rate, "pretrain_epochs": args.pretrain_epochs,
        "pretrain_learning_rate": args.pretrain_learning_rate, "finetune_epochs_full_split": args.finetune_epochs,
        "finetune_learning_rate": args.finetune_learning_rate, "batch_size": args.batch_size, "jit_compile": args.xla,
        "labels_fractions": args.labels_fractions, "finetune_epochs": {str(f): e for f, e in epochs.items()},
        "train_images": int(len(y_train)), "heldout_images": int(len(y_val)),
    }, "pretraining": [], "runs": {str(f): {init: [] for init in INITS} for f in args.labels_fractions}}
    for seed in range(args.seeds):
        folder = os.path.join(args.output_dir, f"seed_{seed}")
        pre = pretrain(args, seed, os.path.join(folder, "pretrain"))
        results["pretraining"].append(pre)
        print(f"seed {seed}: pre-training held-out loss {pre['loss']:.4f}, mean-colour accuracy "
              f"{pre['mean_color_accuracy']} ({pre['train_wall_time_s']:.0f} s)", flush=True)
        backbone_path = os.path.join(pre["output_dir"], "backbone.keras")
        backbone = keras.saving.load_model(backbone_path, compile=False)
        for fraction in args.labels_fractions:
            for init in INITS:
                out = os.path.join(folder, f"{init}_{fraction:g}")
                run = finetune(args, seed, fraction, init, backbone_path, epochs[fraction], out)
                run["distance_to_backbone"] = _distance_to_backbone(os.path.join(out, "model.keras"), backbone)
                results["runs"][str(fraction)][init].append(run)
                print(f"seed {seed}: {fraction:.0%} labels, {init:>10}: held-out accuracy {run['accuracy']:.4f} "
                      f"({run['steps']} steps, {run['train_wall_time_s']:.0f} s)", flush=True)
        if seed == 0 and args.target == "mean_color":
            figure = _figure(args, pre["output_dir"], os.path.join(args.output_dir, "masked_patch_prediction.png"))
            results["figure"] = {"path": os.path.join(args.output_dir, "masked_patch_prediction.png"),
                                 "images": FIGURE_IMAGES, "mean_color_accuracy": figure["accuracy"]}
    results["summary"] = {}
    for fraction, by_init in results["runs"].items():
        accuracy = {init: [r["accuracy"] for r in by_init[init]] for init in INITS}
        gain = [100 * (p - s) for p, s in zip(accuracy["pretrained"], accuracy["scratch"])]
        results["summary"][fraction] = {**{init: _summary(accuracy[init]) for init in INITS},
                                        "gain_points": _summary(gain), "steps": by_init["scratch"][0]["steps"]}
    pre = [p["mean_color_accuracy"] for p in results["pretraining"] if p["mean_color_accuracy"] is not None]
    results["pretraining_summary"] = {"loss": _summary([p["loss"] for p in results["pretraining"]]),
                                      "mean_color_accuracy": _summary(pre) if pre else None}
    if args.target == "mean_color":
        results["pretraining_summary"]["mean_color_majority_baseline"] = _majority_baseline(args)
    return results


def table(results):
    """The markdown table of `results` (the dict written to masked_patch_pretraining.json)."""
    seeds = results["configuration"]["seeds"]

    def cell(s, scale=100, unit="%"):
        text = f"{scale * s['mean']:.2f}{unit}"
        if seeds > 1:
            text += f" ± {scale * s['std']:.2f} ({scale * s['min']:.2f} to {scale * s['max']:.2f})"
        return text

    spread = f"mean ± std over {seeds} seeds (min to max)" if seeds > 1 else "1 seed"
    lines = ["| labels | steps | from scratch | pre-trained + fine-tuned | gain (points) |", "|---|---|---|---|---|"]
    for fraction, s in results["summary"].items():
        lines.append(f"| {float(fraction):.0%} | {s['steps']} | {cell(s['scratch'])} | {cell(s['pretrained'])} | "
                     f"{cell(s['gain_points'], 1, '')} |")
    pre = results["pretraining_summary"]
    lines.append("")
    lines.append(f"Held-out accuracy on {results['configuration']['heldout_images']} images, {spread}.")
    if pre["mean_color_accuracy"] is not None:
        lines.append(f"Pre-training: held-out mean-colour accuracy over the corrupted patches "
                     f"{cell(pre['mean_color_accuracy'])} (always the most common colour: "
                     f"{100 * pre['mean_color_majority_baseline']:.2f}%), loss {cell(pre['loss'], 1, '')}.")
    return "\n".join(lines) + "\n"


def _write(path, text):
    with _files.staged(path, overwrite=True) as tmp:
        with open(tmp, "w") as f:
            f.write(text)


def _fractions(text):
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated fractions in (0, 1]. Received: {text!r}") from None
    if not values or any(not 0 < v <= 1 for v in values):
        raise argparse.ArgumentTypeError(f"fractions must be in (0, 1]. Received: {text!r}")
    return values


def build_parser():
    """The example's `argparse.ArgumentParser` (model flags default to keras-vit-train's demo configuration)."""
    demo = train_cli.build_parser().parse_args([])
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    p.add_argument("--pretrain-epochs", type=int, default=30, help="pre-training epochs (default 30)")
    p.add_argument("--finetune-epochs", type=int, default=6,
                   help="fine-tuning length in passes over the full training split (default 6); runs with fewer "
                   "labels take the same number of steps")
    p.add_argument("--labels-fractions", type=_fractions, default=[0.1, 1.0], help="default 0.1,1")
    p.add_argument("--target", choices=pretraining.TARGETS, default="mean_color")
    p.add_argument("--corruption-rate", type=float, default=0.5, help="in (0, 1), default 0.5")
    p.add_argument("--pretrain-learning-rate", type=float, default=1e-3,
                   help="Adam's peak learning rate (default 1e-3; keras-vit-pretrain's default, the paper's 2e-4, "
                   "is for batch 4096)")
    p.add_argument("--finetune-learning-rate", type=float, default=demo.learning_rate,
                   help=f"AdamW's peak learning rate, both inits (default keras-vit-train's {demo.learning_rate:g})")
    p.add_argument("--batch-size", type=int, default=demo.batch_size, help=f"default {demo.batch_size}")
    for name, value in train_cli.DEFAULTS.items():
        p.add_argument("--" + name.replace("_", "-"), type=int, default=value, help=f"default {value}")
    p.add_argument("--no-xla", dest="xla", action="store_false",
                   help="train without XLA (the recipe compiles with it; without, tiny smoke runs start faster)")
    p.add_argument("--output-dir", default="runs/masked_patch_pretraining")
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("seeds", "pretrain_epochs", "finetune_epochs", "batch_size"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1. Received: {getattr(args, name)}")
    if not 0 < args.corruption_rate < 1:
        parser.error(f"--corruption-rate must be in (0, 1). Received: {args.corruption_rate}")
    for name in ("pretrain_learning_rate", "finetune_learning_rate"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be > 0. Received: {getattr(args, name)}")
    start = time.perf_counter()
    results = experiment(args)
    results["wall_time_s"] = time.perf_counter() - start
    text = table(results)
    print(text)
    _write(os.path.join(args.output_dir, "masked_patch_pretraining.json"), json.dumps(results, indent=2) + "\n")
    _write(os.path.join(args.output_dir, "masked_patch_pretraining.md"), text)
    return results


if __name__ == "__main__":
    main()
