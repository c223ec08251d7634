"""`keras_vit.inspect`'s figures of masked patch prediction (paper Sec. 4.6); public as `keras_vit.inspect.*`.

    mean_color_image(classes, grid, cell_size)     3-bit mean-colour classes painted as images
    corrupted_images(images, corruption, source, cell_size)  the inputs a pre-training model sees
    masked_patch_prediction(model, images)          corrupted inputs, predicted and true mean colours
    plot_masked_patch_prediction(result, path)      a PNG of those
"""

import keras
import numpy as np

from keras_vit.common.validation import check_positive_int
from keras_vit.inspect.internals import as_images, figure_to_png, pyplot

def _mean_color_levels(classes, channels):
    """(..., channels) int levels in [0, 8) of 3-bit mean-colour classes (first channel most significant)."""
    classes = np.asarray(classes, dtype="int64")
    return np.stack([(classes // 8 ** (channels - 1 - c)) % 8 for c in range(channels)], axis=-1)


def mean_color_image(classes, grid, cell_size, channels=3):
    """Paints each patch with the colour of its 3-bit mean-colour class (paper Sec. 4.6, Appendix B.1.2).

    The inverse, for display, of `keras_vit.pretraining.patch_targets(...,
    "mean_color")`: class k of a C-channel image holds the levels
    l_c = (k // 8 ** (C - 1 - c)) % 8, and each level stands for the centre
    of its bin of the channel mean, (l_c + 0.5) / 8 on the [0, 1] scale.

    Args:
        classes: int array `(batch, num_patches)` in [0, 8 ** channels), the
            patches in row-major grid order.
        grid: (rows, cols), rows * cols == num_patches.
        cell_size: int >= 1, pixels per patch side (`backbone_cell_size`).
        channels: int >= 1, default 3.

    Returns:
        float32 `(batch, rows * cell_size, cols * cell_size, channels)` in
        [1/16, 15/16]: every pixel of a patch the colour of its class.

    Raises:
        ValueError: `classes` not of rank 2, outside [0, 8 ** channels), or
            not `grid`'s number of patches; a bad `cell_size` / `channels`.

    Example:

    >>> mean_color_image([[448]], (1, 1), 1)[0, 0, 0].tolist()  # red level 7, green and blue 0
    [0.9375, 0.0625, 0.0625]
    """
    cell = check_positive_int("cell_size", cell_size)
    channels = check_positive_int("channels", channels)
    rows, cols = (check_positive_int("grid", int(g)) for g in grid)
    classes = np.asarray(classes)
    if classes.ndim != 2 or classes.shape[1] != rows * cols or not np.issubdtype(classes.dtype, np.integer):
        raise ValueError(f"`classes` must be an int array (batch, {rows * cols}) for grid={tuple(grid)}. "
                         f"Received: classes with shape {classes.shape} and dtype {classes.dtype}")
    if classes.size and (classes.min() < 0 or classes.max() >= 8**channels):
        raise ValueError(f"`classes` must be in [0, {8 ** channels}) for channels={channels}. "
                         f"Received: classes in [{classes.min()}, {classes.max()}]")
    colours = (_mean_color_levels(classes, channels) + 0.5) / 8.0  # (batch, N, C)
    colours = colours.reshape(len(classes), rows, 1, cols, 1, channels)
    return np.broadcast_to(colours, (len(classes), rows, cell, cols, cell, channels)).reshape(
        len(classes), rows * cell, cols * cell, channels).astype("float32")


def _cells(images, cell):
    """(batch, H, W, C) -> (batch, N, cell, cell, C), patches in row-major grid order."""
    b, h, w, c = images.shape
    return images.reshape(b, h // cell, cell, w // cell, cell, c).transpose(0, 1, 3, 2, 4, 5).reshape(
        b, (h // cell) * (w // cell), cell, cell, c)


def _uncells(cells, height, width):
    b, _, cell, _, c = cells.shape
    return cells.reshape(b, height // cell, width // cell, cell, cell, c).transpose(0, 1, 3, 2, 4, 5).reshape(
        b, height, width, c)


def corrupted_images(images, corruption, source, cell_size, mask_value=0.0):
    """The images as masked patch prediction's corruption leaves them, for display (paper Sec. 4.6).

    The corruption acts on patch embeddings (`MaskedPatchPrediction`); this
    is its picture in pixels: a kind-1 patch (replaced by the `[mask]`
    embedding) is filled with `mask_value` (0, mid grey, by default), a
    kind-2 patch shows the pixels of its `source` patch (for a pure ViT the
    projection is linear per patch, so this is exactly the embedding the
    model sees), kinds 0 and 3 stay as they are.

    Args:
        images: float `(batch, height, width, channels)` in [-1, 1], height
            and width multiples of `cell_size`.
        corruption: int `(batch, num_patches)` kinds 0-3, as
            `keras_vit.pretraining.corruption` returns them.
        source: int `(batch, num_patches)` patch indices, or None (a kind-2
            patch then keeps its own pixels, as the model does).
        cell_size: int >= 1, pixels per patch side.
        mask_value: float in [-1, 1], default 0.0.

    Returns:
        float32 `(batch, height, width, channels)` in [-1, 1].

    Raises:
        ValueError: shapes that do not match, kinds outside 0-3, sources
            outside [0, num_patches).
    """
    from keras_vit.pretraining import MASKED, REPLACED

    cell = check_positive_int("cell_size", cell_size)
    x = np.asarray(images, dtype="float32")
    if x.ndim != 4 or len(x) == 0 or x.shape[1] % cell or x.shape[2] % cell:
        raise ValueError(f"`images` must be (batch >= 1, height, width, channels) with height and width multiples "
                         f"of cell_size={cell}. Received: images with shape {x.shape}")
    n = (x.shape[1] // cell) * (x.shape[2] // cell)
    kind = np.asarray(corruption)
    src = np.broadcast_to(np.arange(n), (len(x), n)) if source is None else np.asarray(source)
    for name, value, high in (("corruption", kind, 4), ("source", src, n)):
        if value.shape != (len(x), n) or not np.issubdtype(value.dtype, np.integer) or value.min() < 0 \
                or value.max() >= high:
            raise ValueError(f"`{name}` must be an int array ({len(x)}, {n}) in [0, {high}) for these images. "
                             f"Received: {name} with shape {value.shape}")
    cells = _cells(x, cell)
    out = np.where((kind == REPLACED)[..., None, None, None], np.take_along_axis(
        cells, src[:, :, None, None, None], axis=1), cells)
    out = np.where((kind == MASKED)[..., None, None, None], np.float32(mask_value), out)
    return _uncells(out, x.shape[1], x.shape[2])


def masked_patch_prediction(model, images, corruption=None, source=None, *, seed=0, corruption_rate=0.5,
                            batch_size=32):
    """What a mean-colour masked-patch-prediction model predicts for a few images (paper Sec. 4.6).

    Corrupts `images` (the given `corruption` / `source`, or a draw of
    `keras_vit.pretraining.corruption` with `seed` and `corruption_rate`),
    runs `model` (inference mode) and returns the arrays that
    `plot_masked_patch_prediction` shows.

    Args:
        model: a `keras_vit.pretraining.MaskedPatchPrediction` with
            target "mean_color" (its backbone of fixed input size).
        images: float `(batch, height, width, channels)` in [-1, 1], the
            backbone's input size.
        corruption, source: int `(batch, num_patches)` (see
            `corrupted_images`), or None to draw them.
        seed: int >= 0, the stateless draw's seed (used when `corruption`
            is None), default 0.
        corruption_rate: float in (0, 1), default 0.5.
        batch_size: int >= 1, images per forward pass.

    Returns:
        dict of NumPy arrays: "images" the input in [0, 1] `(batch, H, W, C)`;
        "corrupted" the corrupted input (`corrupted_images`, masked patches
        grey) in [0, 1]; "predicted" / "true" `(batch, H, W, C)` in [0, 1]:
        the predicted (arg-max) and the true 3-bit mean colour
        (`mean_color_image`) painted on each corrupted patch, the image
        itself on the others; "corruption" and "source" int32
        `(batch, N)`; "predicted_classes" and "true_classes" int32
        `(batch, N)`; "accuracy" float in [0, 1], the share of corrupted
        patches whose class is right.

    Raises:
        ValueError: `model` is not a mean-colour `MaskedPatchPrediction`, or
            `images`, `corruption`, `source` of the wrong shape.
        ImportError: TensorFlow is not installed (the targets and the
            corruption are `keras_vit.pretraining`'s TensorFlow data side).
    """
    from keras_vit.common.backend import tensorflow

    tf = tensorflow("inspect.masked_patch_prediction (keras_vit.pretraining's targets and corruption)")
    from keras_vit import pretraining

    if not isinstance(model, pretraining.MaskedPatchPrediction) or model.target != "mean_color":
        raise ValueError(
            "`model` must be a keras_vit.pretraining.MaskedPatchPrediction with target='mean_color'. Received: "
            f"model={getattr(model, 'name', model)!r} of type {type(model).__name__}"
            + (f" with target={model.target!r}" if isinstance(model, pretraining.MaskedPatchPrediction) else ""))
    x = as_images(model.backbone, images)
    batch_size = check_positive_int("batch_size", batch_size)
    cell = model.cell_size
    rows, cols = x.shape[1] // cell, x.shape[2] // cell
    if corruption is None:
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise ValueError(f"`seed` must be an int >= 0. Received: seed={seed!r}")
        kind, source = (t.numpy() for t in pretraining.corruption(
            np.array([seed, 0], "int64"), len(x), rows * cols, corruption_rate))
    else:
        kind = np.asarray(corruption)
    corrupted = corrupted_images(x, kind, source, cell)  # checks the shapes and ranges of both
    src = np.broadcast_to(np.arange(rows * cols), kind.shape) if source is None else np.asarray(source)
    logits = []
    for start in range(0, len(x), batch_size):
        part = slice(start, start + batch_size)
        inputs = {"images": x[part], "corruption": kind[part].astype("int32"), "source": src[part].astype("int32")}
        logits.append(keras.ops.convert_to_numpy(model(inputs, training=False)))
    predicted = np.argmax(np.concatenate(logits), axis=-1).astype("int32")
    true = tf.convert_to_tensor(pretraining.patch_targets(x, cell, "mean_color")).numpy().astype("int32")
    channels = x.shape[-1]
    hit = (kind != 0)

    def painted(classes):
        colours = _cells(mean_color_image(classes, (rows, cols), cell, channels), cell)
        return _uncells(np.where(hit[..., None, None, None], colours, _cells((x + 1) / 2, cell)), *x.shape[1:3])

    return {
        "images": np.clip((x + 1) / 2, 0, 1),
        "corrupted": np.clip((corrupted + 1) / 2, 0, 1),
        "predicted": painted(predicted),
        "true": painted(true),
        "corruption": kind.astype("int32"),
        "source": np.asarray(src, dtype="int32"),
        "predicted_classes": predicted,
        "true_classes": true,
        "accuracy": float(np.mean(predicted[hit] == true[hit])) if hit.any() else float("nan"),
    }


def plot_masked_patch_prediction(result, path, overwrite=True):
    """Writes a PNG of masked patch prediction: the input, the corrupted input, predicted and true mean colours.

    One column per image, four rows: the image; the corrupted input (masked
    patches grey, replaced patches showing their source); the predicted
    3-bit mean colour of every corrupted patch; the true one (the other
    patches show the image in both). With `result["corruption"]` the
    corrupted patches are outlined in the last three rows. The title gives
    the accuracy over the corrupted patches.

    Args:
        result: the dict of `masked_patch_prediction` (keys "images",
            "corrupted", "predicted", "true", each `(batch, H, W, C)` in
            [0, 1] with C 1 or 3, and "accuracy"; optionally "corruption"
            `(batch, num_patches)`, square patches).
        path: destination `.png`.
        overwrite: replace an existing file (default True; never a folder).

    Returns:
        `path` as a string.

    Raises:
        ValueError: a `result` without those keys or with arrays of
            different shapes; IsADirectoryError: `path` is a folder.
    """
    keys = ("images", "corrupted", "predicted", "true")
    if not isinstance(result, dict) or any(k not in result for k in (*keys, "accuracy")):
        raise ValueError(f"`result` must be the dict of masked_patch_prediction with keys {keys + ('accuracy',)}. "
                         f"Received: {type(result).__name__}"
                         + (f" with keys {sorted(result)}" if isinstance(result, dict) else ""))
    panels = [np.asarray(result[k], dtype="float32") for k in keys]
    shape = panels[0].shape
    if len(shape) != 4 or shape[0] == 0 or shape[-1] not in (1, 3) or any(p.shape != shape for p in panels):
        raise ValueError("`result`'s images, corrupted, predicted and true must all be (batch >= 1, H, W, 1 or 3). "
                         f"Received shapes {[p.shape for p in panels]}")
    kind = result.get("corruption")
    kind = None if kind is None else np.asarray(kind)
    if kind is not None and (kind.ndim != 2 or len(kind) != shape[0] or shape[1] * shape[2] % max(kind.shape[1], 1)):
        raise ValueError(f"`result['corruption']` must be (batch, num_patches) for images of shape {shape}. "
                         f"Received shape {kind.shape}")
    plt = pyplot()
    n = shape[0]
    titles = ("image", "corrupted", "predicted", "true")
    fig, axes = plt.subplots(4, n, figsize=(1.3 * n + 1.2, 5.6), squeeze=False)
    for r, (panel, title) in enumerate(zip(panels, titles)):
        for i in range(n):
            shown = np.clip(panel[i], 0, 1)
            axes[r, i].imshow(shown[..., 0] if shown.shape[-1] == 1 else shown, cmap="gray", vmin=0, vmax=1,
                              interpolation="nearest")
            axes[r, i].set_xticks([])
            axes[r, i].set_yticks([])
            if kind is not None and r > 0:  # outline the corrupted patches (square cells, row-major)
                cell = int(round(np.sqrt(shape[1] * shape[2] / kind.shape[1])))
                for index in np.flatnonzero(kind[i]):
                    row, col = divmod(int(index), shape[2] // cell)
                    axes[r, i].add_patch(plt.Rectangle((col * cell - 0.5, row * cell - 0.5), cell, cell, fill=False,
                                                       edgecolor="tab:orange", linewidth=0.8))
        axes[r, 0].set_ylabel(title, fontsize=8)
    fig.suptitle(f"Masked patch prediction: mean-colour accuracy {result['accuracy']:.1%} over the corrupted patches",
                 fontsize=9)
    return figure_to_png(fig, path, overwrite)
