"""Training recipes for small data: augmentation and regularisation set together, by name.

A ViT lacks a CNN's inductive biases, and on small data it trails one
unless it is trained with strong augmentation and regularisation
(arXiv:2010.11929 Sec. 4.2 and 4.3; AugReg, Steiner et al., TMLR 2022;
DeiT, Touvron et al., ICML 2021). Each recipe here is one row of settings:

| recipe | RandAugment (ops, M) | Mixup alpha | CutMix alpha | random erasing | label smoothing | dropout | stochastic depth | source |
|---|---|---|---|---|---|---|---|---|
| paper | - | - | - | - | 0 | 0 | 0 | ViT paper Sec. 4.1, B.1: geometric augmentation only (keras-vit-train's recipe before these) |
| augreg-light | (2, 10) | 0.2 | - | - | 0 | 0 | 0 | AugReg "light2" (big_vision's `RANDAUG_DEF` / `MIXUP_DEF`), no regularisation |
| augreg-medium | (2, 15) | 0.5 | - | - | 0 | 0.1 | 0.1 | AugReg "medium2" with its regularisation 0.1 |
| augreg-heavy | (2, 20) | 0.8 | - | - | 0 | 0.1 | 0.1 | AugReg "strong2" (the issue's "heavy") with regularisation 0.1 |
| deit | (2, 9) | 0.8 | 1.0 | 0.25 | 0.1 | 0 | 0.1 | DeiT Table 9 (rand-m9-mstd0.5, mixup 0.8, cutmix 1.0, erasing 0.25, smoothing 0.1, drop path 0.1) |
| mixup-smoothing | - | 0.2 | - | - | 0.1 | 0 | 0 | the batch-level half of both: AugReg light2's Mixup, DeiT's label smoothing, no RandAugment |
| deit-distill | - | 0.2 | - | - | 0.1 | 0 | 0 | mixup-smoothing's settings and DeiT's hard distillation (Sec. 4) from a CNN teacher |

The `distillation` setting ("hard", "soft" or None) is DeiT's distillation
through attention (`keras_vit.distillation`): the student is built with a
distillation token and trained against a teacher (`keras-vit-train
--teacher`); only `deit-distill` has it. Its augmentation is mixup-smoothing's,
not DeiT's Table 9: on digits the RandAugment-based recipes did not pay at
this budget (docs/recipes.md).

Every recipe keeps the pipeline's geometric `augment` ("affine" for
digits, "crop" for other data in `keras-vit-train`), the AdamW optimizer,
warm-up + cosine schedule and clipping of `keras_vit.training`. RandAugment's
magnitude M is on the papers' scale (`keras_vit.augmentation`). Mixup and
CutMix with both alphas: one of the two per batch (DeiT).
"""

from keras_vit import augmentation
from keras_vit.common.validation import check_choice, check_rate

SETTINGS = ("rand_augment", "mixup_alpha", "cutmix_alpha", "random_erasing", "label_smoothing", "dropout_rate",
            "stochastic_depth_rate", "distillation")
DISTILLATIONS = ("hard", "soft")  # keras_vit.distillation.DISTILLATIONS (recipes sits below it: no import)

_NONE = {"rand_augment": None, "mixup_alpha": 0.0, "cutmix_alpha": 0.0, "random_erasing": 0.0,
         "label_smoothing": 0.0, "dropout_rate": 0.0, "stochastic_depth_rate": 0.0, "distillation": None}
RECIPES = {
    "paper": dict(_NONE),
    "augreg-light": {**_NONE, "rand_augment": (2, 10.0), "mixup_alpha": 0.2},
    "augreg-medium": {**_NONE, "rand_augment": (2, 15.0), "mixup_alpha": 0.5, "dropout_rate": 0.1,
                      "stochastic_depth_rate": 0.1},
    "augreg-heavy": {**_NONE, "rand_augment": (2, 20.0), "mixup_alpha": 0.8, "dropout_rate": 0.1,
                     "stochastic_depth_rate": 0.1},
    "deit": {**_NONE, "rand_augment": (2, 9.0), "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "random_erasing": 0.25,
             "label_smoothing": 0.1, "stochastic_depth_rate": 0.1},
    "mixup-smoothing": {**_NONE, "mixup_alpha": 0.2, "label_smoothing": 0.1},
    "deit-distill": {**_NONE, "mixup_alpha": 0.2, "label_smoothing": 0.1, "distillation": "hard"},
}
SOURCES = {
    "paper": "ViT paper (arXiv:2010.11929) Sec. 4.1 and Appendix B.1: geometric augmentation only",
    "augreg-light": "AugReg (Steiner et al., TMLR 2022) 'light2': randaug(2, 10), mixup 0.2, no regularisation",
    "augreg-medium": "AugReg 'medium2': randaug(2, 15), mixup 0.5; dropout and stochastic depth 0.1",
    "augreg-heavy": "AugReg 'strong2': randaug(2, 20), mixup 0.8; dropout and stochastic depth 0.1",
    "deit": "DeiT (Touvron et al., ICML 2021) Table 9: rand-m9, mixup 0.8, cutmix 1.0, erasing 0.25, "
            "label smoothing 0.1, stochastic depth 0.1",
    "mixup-smoothing": "AugReg 'light2's Mixup 0.2 and DeiT's label smoothing 0.1, without RandAugment: no per-image "
                       "cost beyond the geometric augmentation (make demo's recipe, docs/recipes.md)",
    "deit-distill": "DeiT (Touvron et al., ICML 2021) Sec. 4: a distillation token trained on a CNN teacher's hard "
                    "decisions, with mixup-smoothing's Mixup 0.2 and label smoothing 0.1",
}


def recipe(name, **overrides):
    """The settings of recipe `name`, with the ones in `overrides` that are not None put in their place.

    Args:
        name: one of `RECIPES`: "paper", "augreg-light", "augreg-medium",
            "augreg-heavy", "deit", "mixup-smoothing", "deit-distill".
        **overrides: any of `SETTINGS`; None keeps the recipe's value.
            rand_augment: None-or-(num_ops, magnitude) as in
            `keras_vit.augmentation`, or "none" (off); mixup_alpha,
            cutmix_alpha, random_erasing: as in `keras_vit.data`;
            label_smoothing, dropout_rate, stochastic_depth_rate: floats in
            [0, 1); distillation: "hard", "soft", or "none" (off).

    Returns:
        dict with every key of `SETTINGS` (rand_augment a tuple or None).

    Raises:
        ValueError: an unknown `name` (the message lists the recipes), an
            unknown setting, or a value out of its range (named).
    """
    check_choice("recipe", name, tuple(RECIPES))
    unknown = sorted(set(overrides) - set(SETTINGS))
    if unknown:
        raise ValueError(f"unknown recipe setting(s) {', '.join(unknown)}; the settings are {', '.join(SETTINGS)}")
    settings = dict(RECIPES[name])
    for key, value in overrides.items():
        if value is not None:
            settings[key] = None if (key in ("rand_augment", "distillation") and value == "none") else value
    # The ranges only: the number of classes (which Mixup needs 2 of) is checked by the data pipeline.
    settings["rand_augment"] = augmentation.check_augmentation(
        rand_augment=settings["rand_augment"], random_erasing=settings["random_erasing"],
        mixup_alpha=settings["mixup_alpha"], cutmix_alpha=settings["cutmix_alpha"])
    for key in ("label_smoothing", "dropout_rate", "stochastic_depth_rate"):
        check_rate(key, settings[key])
    if settings["distillation"] is not None:
        check_choice("distillation", settings["distillation"], DISTILLATIONS)
    return settings
