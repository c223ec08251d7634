"""Seeded stratified subsets of a labelled set (`keras_vit.data.stratified_subset`, `--labels-fraction`); NumPy only."""

import numpy as np


def stratified_subset(labels, fraction, *, seed=0, class_names=None):
    """Indices of a seeded, stratified fraction of a labelled set (training with fewer labels).

    Each class keeps `round(fraction * n_c)` of its `n_c` examples (halves
    round up), drawn without replacement by a NumPy `default_rng(seed)`
    permutation, class by class in the order of the class indices: the same
    labels, fraction and seed give the same subset in every run and on
    every machine. As in scikit-learn's stratified splits, every class keeps
    its share of the set; unlike them the per-class counts are rounded one
    by one, so the total can differ from `round(fraction * n)` by up to half
    the number of classes. The held-out split is not touched: subset only
    the training labels. Used by `keras-vit-train --labels-fraction`, and by
    the masked-patch-prediction experiment (paper Sec. 4.6: pre-train
    without labels, fine-tune with few).

    Args:
        labels: int array-like `(n,)` of class indices >= 0.
        fraction: float in (0, 1]: the share of each class kept; 1 keeps
            every example.
        seed: int >= 0, default 0.
        class_names: optional list of names, used in the error message.

    Returns:
        int64 NumPy array `(k,)` of indices into `labels`, sorted ascending
        (the set's own order; shuffle in the pipeline).

    Raises:
        ValueError: `fraction` outside (0, 1], a bad `seed`, labels that are
            not a 1-D array of integers >= 0, or a class present in
            `labels` that would keep no example (the message names the
            class, its count and the smallest fraction that keeps one).

    Example:
    >>> stratified_subset([0, 0, 0, 0, 1, 1, 1, 1, 1, 1], 0.5, seed=0).shape
    (5,)
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ValueError(f"`labels_fraction` must be a float in (0, 1]. Received: labels_fraction={fraction!r}")
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"`seed` must be an int >= 0. Received: seed={seed!r}")
    labels = np.asarray(labels)
    if labels.ndim != 1 or (labels.size and (labels.dtype.kind not in "iu" or labels.min() < 0)):
        raise ValueError(
            "`labels` must be a 1-D array of class indices >= 0. "
            f"Received: labels of shape {labels.shape} and dtype {labels.dtype}"
        )
    rng = np.random.default_rng(int(seed))
    chosen = []
    for label in np.unique(labels):
        members = np.flatnonzero(labels == label)
        keep = int(np.floor(round(fraction * len(members), 9) + 0.5))  # 0.35 x 90 is 31.5 (up), not 31.4999...
        if keep == 0:
            name = class_names[label] if class_names is not None and label < len(class_names) else int(label)
            raise ValueError(
                f"labels_fraction={fraction} leaves class {name!r} with no image: round({fraction} x "
                f"{len(members)}) = 0. Give labels_fraction >= {_smallest_fraction(labels)} (every class then keeps an "
                f"image), or more images of that class"
            )
        chosen.append(rng.permutation(members)[:keep])
    return np.sort(np.concatenate(chosen)) if chosen else np.zeros((0,), np.int64)


def _smallest_fraction(labels):
    """The smallest labels fraction, rounded up to 3 significant digits, that keeps an image of every class."""
    import math

    need = 0.5 / np.unique(labels, return_counts=True)[1].min()  # round half up keeps 1 from 0.5 images on
    scale = 10.0 ** (2 - math.floor(math.log10(need)))
    return math.ceil(need * scale - 1e-9) / scale


def labels_subset(labels, labels_fraction, seed, class_names):
    """None (keep all) or the indices `stratified_subset` keeps for `labels_fraction` (seeded by `seed or 0`)."""
    if labels_fraction is None:
        return None
    return stratified_subset(labels, labels_fraction, seed=seed or 0, class_names=class_names)
