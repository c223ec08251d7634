"""The paper's small-data question, on digits: how much of a CNN's lead does a training recipe win back?

`python -m benchmarks.recipes [--epochs 30] [--seeds 0 1 2] [--update-results]` trains, from
scratch on scikit-learn's digits (1,437 training scans, the fixed 360 held out), each model of
`MODELS` with the recipes of `DEFAULT_RECIPES` (the hybrid and the CNN with `SHORT_LIST`'s), to
keep the whole run near an hour on 2 CPU cores; `--all-recipes` trains every recipe of
`keras_vit.recipes.RECIPES` on every model. `deit-distill` (DeiT's distillation token and hard
distillation, `keras_vit.distillation`) trains each ViT twice, against each teacher of `TEACHERS`:
the CNN and the hybrid of the same run and seed, trained with `TEACHER_RECIPE` first and kept in
`runs/recipes/models/` (a 32 px teacher sees `vit-demo`'s 16 px images resized to 32 px inside it;
the result records the teacher's own held-out accuracy on those). Every run has the same number of epochs and the
same optimizer (AdamW 2e-3, weight decay 0.05, 6% warm-up, cosine, clipping at norm 1: the
`keras-vit-train` defaults) and batch 64, once per seed. The models:

- `vit-demo`: `make demo`'s ViT (16 px, patch 4, 16 patches, hidden 128, 4 blocks, 0.8 M parameters);
- `vit-ti-width`: ViT-Ti's width (hidden 192, 3 heads, MLP 768) with 4 blocks, 32 px, patch 8;
- `hybrid`: a ResNet stem and two bottleneck stages (output stride 8) under `vit-demo`'s encoder,
  32 px, 1x1 patches of the 4x4 feature map (paper Sec. 3.1);
- `cnn`: `keras.applications.MobileNetV3Small` (no weights, 32 px, its preprocessing off: the
  pipeline gives [-1, 1]; BatchNormalization momentum 0.9, see `build`).

Every recipe keeps the pipeline's "affine" augmentation; dropout and stochastic depth apply to the
ViTs only (MobileNetV3Small has neither in its blocks). Each run's result is cached in
`runs/recipes/MODEL-RECIPE-sSEED.json` (a rerun skips it; `--fresh` trains again), so an
interrupted run continues. The table gives the held-out accuracy's mean and standard deviation
over the seeds, and seconds per epoch. `--update-results` (a full run: every model, the default recipes or more,
seeds 0 1 2, 30 epochs) writes it to benchmarks/results/recipes.md, the current results that benchmarks/README.md
links to, under a line naming the runs' dates and CPU.
"""

import argparse
import json
import os
import sys
import time

import keras

MODELS = ("vit-demo", "vit-ti-width", "hybrid", "cnn")
# The hour the issue gives the whole run (2 CPU cores): three recipes on the two ViTs, two on the hybrid and the CNN;
# --recipes and --all-recipes run the others (augreg-medium and -heavy, and every recipe on every model).
DEFAULT_RECIPES = ("paper", "augreg-light", "mixup-smoothing", "deit-distill")
SHORT_LIST = ("paper", "mixup-smoothing")
DISTILL = "deit-distill"  # on the ViTs: one run per teacher, as the pseudo-recipe "deit-distill:TEACHER"
TEACHERS = ("cnn", "hybrid")
TEACHER_RECIPE = "mixup-smoothing"  # both teachers' best row in the table
CACHE = os.path.join("runs", "recipes")
RESULTS_TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "recipes.md")  # --update-results
DEFAULT_SEEDS = (0, 1, 2)
DEFAULT_EPOCHS = 30
BATCH_SIZE = 64
LEARNING_RATE = 2e-3


def build(name, settings, classes=10):
    """The model `name` of `MODELS` (logits out) and its input size in pixels; a ViT gets a distillation token
    when `settings` distil."""
    import keras_vit

    regularisation = {"dropout_rate": settings["dropout_rate"],
                      "stochastic_depth_rate": settings["stochastic_depth_rate"]}
    common = {"classes": classes, "classifier_activation": None, **regularisation}
    if settings.get("distillation") and name in ("vit-demo", "vit-ti-width"):
        common["distillation_token"] = True
    if name == "vit-demo":
        return keras_vit.VisionTransformer(input_shape=(16, 16, 3), patch_size=4, hidden_size=128, num_layers=4,
                                           num_heads=4, mlp_dim=512, name="vit_demo", **common), 16
    if name == "vit-ti-width":
        return keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=8, hidden_size=192, num_layers=4,
                                           num_heads=3, mlp_dim=768, name="vit_ti_width", **common), 32
    if name == "hybrid":
        return keras_vit.VisionTransformer(input_shape=(32, 32, 3), patch_size=1, hidden_size=128, num_layers=4,
                                           num_heads=4, mlp_dim=512, resnet_num_layers=(1, 1), name="hybrid",
                                           **common), 32
    if name == "cnn":
        model = keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None, classes=classes,
                                                    include_preprocessing=False, classifier_activation=None)
        # keras.applications' BatchNormalization momentum 0.999 suits ImageNet's thousands of steps an epoch; after
        # 690 steps here its moving statistics were still mostly their start, and the model was at chance (10%)
        # held out while it trained. 0.9 averages over about ten steps.
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = 0.9
        return model, 32
    raise ValueError(f"`model` must be one of {', '.join(MODELS)}. Received: {name!r}")


def teacher_path(teacher, seed, epochs):
    """Where the run of `teacher` with `TEACHER_RECIPE` keeps its trained model for the distilled runs."""
    return os.path.join(CACHE, "models", f"{teacher}-{TEACHER_RECIPE}-s{seed}-e{epochs}.keras")


def _teacher(teacher, seed, epochs, size, val):
    """The trained teacher for a student of `size` px (resized up inside it when smaller), and its held-out
    accuracy on the student's images."""
    from keras_vit.losses import Accuracy

    model = keras.saving.load_model(teacher_path(teacher, seed, epochs))
    side = model.input_shape[1]
    if side != size:
        model = keras.Sequential([keras.Input((size, size, 3)), keras.layers.Resizing(side, side), model],
                                 name=f"{teacher}_at_{size}px")
    accuracy = Accuracy()
    for images, labels in val:
        accuracy.update_state(labels, model(images, training=False))
    return model, float(accuracy.result())


def train_one(model_name, recipe_name, seed, epochs):
    """Trains one model with one recipe and seed; returns its result dict (accuracy, seconds, parameters).

    `recipe_name` "deit-distill:TEACHER" trains the ViT with a distillation token against that teacher
    (`teacher_path`, trained first); the run of a teacher with `TEACHER_RECIPE` saves its model there."""
    from benchmarks.machine import cpu
    from keras_vit import data, recipes, training
    from keras_vit.distillation import Distiller

    recipe, _, teacher_name = recipe_name.partition(":")
    settings = recipes.recipe(recipe)
    keras.utils.set_random_seed(seed)
    model, size = build(model_name, settings)
    augmentation = {k: settings[k] for k in ("rand_augment", "random_erasing", "mixup_alpha", "cutmix_alpha")}
    train = data.digits("train", image_size=size, batch_size=BATCH_SIZE, augment="affine", seed=seed, **augmentation)
    val = data.digits("validation", image_size=size, batch_size=BATCH_SIZE)
    steps = int(train.cardinality())
    trained, extra = model, {}
    if teacher_name:
        teacher, teacher_accuracy = _teacher(teacher_name, seed, epochs, size, val)
        trained = Distiller(model, teacher, distillation=settings["distillation"])
        extra = {"teacher": teacher_name, "teacher_accuracy": teacher_accuracy}
    training.compile_model(trained, total_steps=epochs * steps, learning_rate=LEARNING_RATE,
                           warmup_steps=int(0.06 * epochs * steps), label_smoothing=settings["label_smoothing"],
                           from_logits=True)
    clock = _EpochClock()
    start = time.perf_counter()
    trained.fit(train, epochs=epochs, verbose=0, shuffle=False, callbacks=[clock])
    seconds = time.perf_counter() - start
    results = trained.evaluate(val, verbose=0, return_dict=True)  # a Distiller's accuracy is the student's
    if model_name in TEACHERS and recipe_name == TEACHER_RECIPE:
        os.makedirs(os.path.dirname(teacher_path(model_name, seed, epochs)), exist_ok=True)
        model.save(teacher_path(model_name, seed, epochs))
    return {"model": model_name, "recipe": recipe_name, "seed": seed, "epochs": epochs,
            "accuracy": float(results["accuracy"]), "train_seconds": seconds,
            "epoch_seconds": clock.median(), "parameters": int(model.count_params()),
            "jit_compile": bool(trained.jit_compile), "measured": time.strftime("%Y-%m-%d", time.gmtime()),
            "cpu": cpu(), **extra}


class _EpochClock(keras.callbacks.Callback):
    """Times each epoch; `median()` of those after the first (which compiles the step)."""

    def __init__(self):
        super().__init__()
        self.times, self._start = [], None

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.times.append(time.perf_counter() - self._start)

    def median(self):
        import numpy as np

        return float(np.median(self.times[1:] or self.times))


def recipes_for(model_name, recipe_names, every=False):
    """The recipes `model_name` is trained with: all of `recipe_names` for the ViTs, `deit-distill` as one run per
    teacher ("deit-distill:cnn", "deit-distill:hybrid"); for the hybrid and the CNN those of `SHORT_LIST` (their
    XLA compilation alone takes about half a minute a run here), every one but `deit-distill` when `every`, and
    `TEACHER_RECIPE` when the ViTs distil."""
    if model_name in TEACHERS:
        own = [r for r in recipe_names if r != DISTILL and (every or r in SHORT_LIST)]
        return own + [TEACHER_RECIPE] * (DISTILL in recipe_names and TEACHER_RECIPE not in own)
    return [f"{r}:{t}" if r == DISTILL else r for r in recipe_names for t in (TEACHERS if r == DISTILL else [""])]


def _ordered(models, recipe_names):
    """The models in training order: a teacher before the ViTs that distil from it (the teachers are trained
    even when `models` leaves them out, so that the distilled runs have them)."""
    needed = list(TEACHERS) if DISTILL in recipe_names and set(models) - set(TEACHERS) else []
    return [m for m in TEACHERS if m in models or m in needed] + [m for m in models if m not in TEACHERS]


def run_all(models, recipe_names, seeds, epochs, fresh=False, every=False):
    """Every (model, recipe, seed) once, each in a fresh process so that no run's state leaks into the next;
    results read from and written to `CACHE`. Returns the list of result dicts."""
    import subprocess

    os.makedirs(CACHE, exist_ok=True)
    results = []
    for seed in seeds:
        for model_name in _ordered(models, recipe_names):
            names = recipes_for(model_name, recipe_names, every)
            if model_name not in models:  # a teacher the distilled runs need, not a row of the table
                names = [TEACHER_RECIPE]
            for recipe_name in names:
                path = os.path.join(CACHE, f"{model_name}-{recipe_name}-s{seed}.json")
                cached = _read(path)
                lost = (model_name in TEACHERS and recipe_name == TEACHER_RECIPE  # a teacher without its model
                        and not os.path.isfile(teacher_path(model_name, seed, epochs)))
                if fresh or lost or cached is None or cached.get("epochs") != epochs:
                    subprocess.run([sys.executable, "-m", "benchmarks.recipes", "--one", model_name, recipe_name,
                                    str(seed), "--epochs", str(epochs)], check=True,
                                   env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")})
                    cached = _read(path)
                print(f"{model_name:13s} {recipe_name:20s} seed {seed}: {cached['accuracy']:.4f} "
                      f"({cached['train_seconds']:.0f} s)", flush=True)
                if model_name in models:
                    results.append(cached)
    return results


def cached(models, recipe_names, seeds, epochs, every=False):
    """The results already in `CACHE` for these runs (none is trained): what `--cached` reports."""
    found = [_read(os.path.join(CACHE, f"{m}-{r}-s{s}.json")) for s in seeds for m in models
             for r in recipes_for(m, recipe_names, every)]
    return [r for r in found if r is not None and r.get("epochs") == epochs]


def _read(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(results):
    """The markdown table: one row per model, one column per recipe, mean +- std of the seeds' accuracy (%)."""
    import numpy as np

    models = list(dict.fromkeys(r["model"] for r in results))
    recipe_names = list(dict.fromkeys(r["recipe"] for r in results))
    seeds = sorted({r["seed"] for r in results})
    timed = list(SHORT_LIST) + [r for r in recipe_names if r.startswith(f"{DISTILL}:")]
    lines = [f"Held-out accuracy (%) on digits' 360 held-out scans, mean +- standard deviation over seeds "
             f"{', '.join(map(str, seeds))}; {results[0]['epochs']} epochs, batch {BATCH_SIZE}, AdamW "
             f"{LEARNING_RATE:g}, from scratch; deit-distill:T is the ViT with a distillation token trained against "
             f"teacher T (the {TEACHER_RECIPE} row's model of the same seed); the last columns: seconds per epoch "
             f"(median over epochs after the first and over seeds) with the recipes named.", "",
             "| model | parameters | " + " | ".join(recipe_names) + " | s/epoch: " + " / ".join(timed) + " |",
             "|---|---|" + "---|" * len(recipe_names) + "---|"]
    for model in models:
        rows = [r for r in results if r["model"] == model]
        cells = []
        for name in recipe_names:
            acc = np.array([r["accuracy"] for r in rows if r["recipe"] == name]) * 100
            partial = f" ({len(acc)} seed{'s' if len(acc) > 1 else ''})" if 0 < len(acc) < len(seeds) else ""
            cells.append(f"{acc.mean():.2f} +- {acc.std():.2f}{partial}" if len(acc) else "-")
        times = [np.median([r["epoch_seconds"] for r in rows if r["recipe"] == name] or [np.nan])
                 for name in timed]
        lines.append(f"| {model} | {rows[0]['parameters']:,} | " + " | ".join(cells)
                     + " | " + " / ".join("-" if np.isnan(t) else f"{t:.2f}" for t in times) + " |")
    return "\n".join(lines)


def results_text(results, text):
    """The current results file's text: a header naming the runs' dates and CPU (as `train_one` records them;
    "not recorded" for runs cached before it did), then the table `text`."""
    def named(key, missing):
        found = sorted({r[key] for r in results if r.get(key)})
        return ", ".join(found + [missing] * any(not r.get(key) for r in results))

    return (f"# Training recipes on digits, {named('measured', 'date not recorded')}, "
            f"{named('cpu', 'CPU not recorded')}\n\n{text}\n")


def write_results(results, text, path=None):
    """Writes `results_text` to `path` (default: benchmarks/results/recipes.md, which benchmarks/README.md links to)
    through a temporary file in the same folder, then a rename."""
    from keras_vit.common.files import write_text

    return write_text(path or RESULTS_TABLE, results_text(results, text))


def main(argv=None):
    from keras_vit.recipes import RECIPES

    parser = argparse.ArgumentParser(prog="python -m benchmarks.recipes", description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    parser.add_argument("--models", nargs="+", choices=MODELS, default=list(MODELS))
    parser.add_argument("--recipes", nargs="+", choices=list(RECIPES), default=list(DEFAULT_RECIPES))
    parser.add_argument("--all-recipes", action="store_true", help="every recipe on every model (hours)")
    parser.add_argument("--fresh", action="store_true", help="train again even where a cached result exists")
    parser.add_argument("--update-results", action="store_true",
                        help="save the table as the current results in benchmarks/results/, which "
                             "benchmarks/README.md links to (full runs only)")
    parser.add_argument("--cached", action="store_true", help="report the cached runs only, training none")
    parser.add_argument("--one", nargs=3, metavar=("MODEL", "RECIPE", "SEED"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        model_name, recipe_name, seed = args.one
        result = train_one(model_name, recipe_name, int(seed), args.epochs)
        path = os.path.join(CACHE, f"{model_name}-{recipe_name}-s{seed}.json")
        with open(path + ".tmp", "w") as f:
            json.dump(result, f, indent=1)
        os.replace(path + ".tmp", path)
        return 0
    recipe_names = list(RECIPES) if args.all_recipes else args.recipes
    full = set(args.models) == set(MODELS) and set(DEFAULT_RECIPES) <= set(recipe_names) and \
        sorted(args.seeds) == list(DEFAULT_SEEDS) and args.epochs == DEFAULT_EPOCHS
    if args.update_results and not full:
        parser.error("--update-results needs a full run (every model, at least the default recipes, --seeds 0 1 2, "
                     f"--epochs {DEFAULT_EPOCHS}): the current results and the README's text describe one")
    if args.cached:
        results = cached(args.models, recipe_names, args.seeds, args.epochs, every=args.all_recipes)
        expected = len(args.seeds) * sum(len(recipes_for(m, recipe_names, args.all_recipes)) for m in args.models)
        if args.update_results and len(results) < expected:
            parser.error(f"--update-results: {expected - len(results)} of the {expected} runs are not in {CACHE} "
                         "(run without --cached to train them)")
    else:
        results = run_all(args.models, recipe_names, args.seeds, args.epochs, args.fresh, every=args.all_recipes)
    text = table(results)
    print(text)
    if args.update_results:
        print(f"written: {write_results(results, text)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
