"""Checks of the NumPy arrays `keras_vit.data.from_arrays` takes: the pixel range of the images (issue 43: arrays
already scaled to [0, 1] or [-1, 1] were divided again into nearly constant images) and the labels.
"""

import numpy as np

INPUT_RANGES = ((0, 255), (0, 1), (-1, 1))


def to_pixels(images, input_range):
    """`images` in `input_range` as pixels in [0, 255] (unchanged for (0, 255)); raises ValueError naming
    `input_range` for another range, values outside it, NaN or infinite values, bool images (masks, not
    pictures), or float images given as (0, 255) that are plainly scaled already (all in [-1, 1], some not
    whole)."""
    given = input_range
    try:
        input_range = tuple(float(v) for v in input_range)
    except (TypeError, ValueError):
        input_range = None
    if input_range not in INPUT_RANGES:
        raise ValueError(f"`input_range` must be one of {', '.join(map(str, INPUT_RANGES))}. "
                         f"Received: input_range={given!r}")
    if images.dtype.kind == "b":
        raise ValueError("`images` must hold pixel values, and they are bool (a mask?); pass uint8 pixels in [0, 255] "
                         "or floats in input_range. Received: images of dtype bool")
    if images.size == 0 or images.dtype.kind not in "iuf":
        return images
    if images.dtype.kind == "f" and not np.isfinite(images).all():
        bad = int((~np.isfinite(images)).sum())
        raise ValueError(f"`images` must hold finite pixel values. Received: {bad} NaN or infinite value"
                         f"{'s' if bad > 1 else ''} (of {images.size})")
    low, high = float(np.min(images)), float(np.max(images))
    lo, hi = input_range
    if low < lo - 1e-3 or high > hi + 1e-3:
        raise ValueError(
            f"`images` must hold pixels in input_range={(int(lo), int(hi))}. Received: values from {low:g} to {high:g}"
            + (f"; pass input_range={(0, 1) if low >= 0 else (-1, 1)} for images scaled so"
               if low >= -1 and high <= 1 and input_range == (0, 255) else ""))
    if input_range == (0, 255):
        if images.dtype.kind == "f" and low >= -1.0 and high <= 1.0 and np.any(images != np.round(images)):
            raise ValueError(
                f"`images` look scaled already (float values from {low:g} to {high:g}, not whole pixel values), but "
                f"input_range=(0, 255) (the default) takes pixels in [0, 255]; pass input_range="
                f"{(0, 1) if low >= 0 else (-1, 1)} so that they are not scaled twice")
        return images
    return ((images.astype("float32") - lo) * (255.0 / (hi - lo))).astype("float32")


def check_labels(labels, count, class_names):
    """Returns labels as int32 after checking shape, integrality, range and `class_names`."""
    labels = np.asarray(labels)
    if labels.shape != (count,):
        raise ValueError(
            f"`labels` must have shape ({count},), one label per image. Received: labels with shape {labels.shape}"
        )
    if labels.dtype.kind not in "iuf" or (labels.dtype.kind == "f" and np.any(labels != np.round(labels))):
        raise ValueError(
            f"`labels` must be integer class indices. Received: labels of dtype {labels.dtype}, e.g. {labels[:3].tolist()}"
        )
    if count and labels.min() < 0:
        raise ValueError(f"`labels` must be class indices >= 0. Received: a label of {labels.min()}")
    if class_names is not None and count and labels.max() >= len(class_names):
        raise ValueError(
            f"`labels` must be < len(class_names) = {len(class_names)}. Received: a label of {labels.max()}"
        )
    return labels.astype("int32")
