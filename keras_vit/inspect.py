"""Looking inside a ViT: the paper's inspection tools (Sec. 4.5, Figures 6, 7 and 14).

    attention_weights(model, images)          per layer (batch, heads, seq, seq)
    attention_rollout(model, images)          one map per image at the input resolution (Fig. 6, 14)
    mean_attention_distance(model, images)    (layers, heads) in pixels (Fig. 7 right)
    position_embedding_similarity(model)      (rows, cols, rows, cols) cosines (Fig. 7 centre)
    embedding_filters(model, n)               top principal components of the patch filters (Fig. 7 left)
    masked_patch_prediction(model, images)    corrupted inputs, predicted and true mean colours (Sec. 4.6)
    plot_*(..., path)                         PNG figures of each (matplotlib)

The pure-array functions `rollout` and `attention_distance` hold the
mathematics and take plain NumPy arrays.
"""

import keras
import numpy as np

from keras_vit._validation import check_positive_int


def _describe(model):
    from keras_vit.weights.loader import describe, resnet_num_layers

    d = describe(model)
    stride = 1
    stages = resnet_num_layers(model)
    if stages:
        from keras_vit.models.resnet import output_stride

        stride = output_stride(stages)
    d["pixels_per_patch"] = d["patch_size"] * stride
    d["prefix"] = int(d["class_token"])
    return d


def _as_images(model, images):
    x = np.asarray(images, dtype="float32")
    expected = tuple(model.input_shape[1:])
    if x.ndim == 3:
        x = x[None]
    if x.ndim != 4 or tuple(x.shape[1:]) != expected or len(x) == 0:
        raise ValueError(
            f"`images` must have shape (batch >= 1, {', '.join(map(str, expected))}) (or one image without the "
            f"batch axis), scaled to [-1, 1] like the model's input. Received shape {np.shape(images)}"
        )
    return x


def attention_weights(model, images, batch_size=32):
    """Attention weights of every encoder block, from the model itself (shared layers, no copy of the weights).

    The softmax attention matrices of paper Eq. 2's MSA, as Keras'
    `MultiHeadAttention` computes them inside each `TransformerBlock`.

    Args:
        model: a keras_vit Vision Transformer (pure or hybrid).
        images: float array (batch, height, width, channels) or one image
            (height, width, channels), scaled to [-1, 1] (the model's input).
        batch_size: int, images per forward pass.

    Returns:
        list of num_layers float32 arrays (batch, num_heads, seq_len,
        seq_len); each row sums to 1. seq_len = patches + class token.

    Raises:
        ValueError: `images` of the wrong shape; a model that is not a
            keras_vit ViT.
    """
    import keras

    d = _describe(model)
    x = _as_images(model, images)
    batch_size = check_positive_int("batch_size", batch_size)
    embed = keras.Model(model.inputs[0], d["encoder"].output)  # a view of the same layers, no new weights
    out = [[] for _ in d["blocks"]]
    for start in range(0, len(x), batch_size):
        tokens = embed(x[start:start + batch_size], training=False)
        for i, block in enumerate(d["blocks"]):
            tokens, a = block(tokens, training=False, return_attention_scores=True)
            out[i].append(keras.ops.convert_to_numpy(a).astype("float32"))
    return [np.concatenate(a, axis=0) for a in out]


def rollout(attentions, residual=True):
    """Attention rollout (Abnar & Zuidema 2020), the method of the paper's Figures 6 and 14.

    Per layer the heads are averaged, the identity added for the residual
    connection (A' = (A + I) / 2, rows renormalised), and the layers
    multiplied: R = A'_L ... A'_1. R[i, j] is how much token j flows into
    token i at the output.

    Args:
        attentions: list of arrays (batch, heads, seq, seq), first layer first.
        residual: bool, add the identity (default True, as in the paper).

    Returns:
        float32 (batch, seq, seq).

    Example:

    >>> eye = np.eye(3)[None, None]
    >>> rollout([eye, eye])[0].tolist()
    [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    """
    if not attentions:
        raise ValueError("`attentions` must be a non-empty list of (batch, heads, seq, seq) arrays")
    result = None
    for a in attentions:
        a = np.asarray(a, dtype="float64")
        if a.ndim != 4 or a.shape[-1] != a.shape[-2] or (result is not None and result.shape[-1] != a.shape[-1]):
            raise ValueError("`attentions` must all be (batch, heads, seq, seq) with the same batch and seq. "
                             f"Received shape {a.shape}")
        a = a.mean(axis=1)
        if residual:
            a = 0.5 * a + 0.5 * np.eye(a.shape[-1])
        a = a / a.sum(axis=-1, keepdims=True)
        result = a if result is None else a @ result
    return result.astype("float32")


def attention_rollout(model, images, batch_size=32):
    """Attention-rollout maps of the class token (paper Fig. 6 and 14), one per image, at the input resolution.

    The class token's row of `rollout` over its patch columns (the mean row
    of the patch tokens for a model without class token), laid out on the
    patch grid, scaled to [0, 1] per image and resized bilinearly to the
    image's height and width.

    Args:
        model, images, batch_size: as `attention_weights`.

    Returns:
        float32 (batch, height, width) in [0, 1].
    """
    d = _describe(model)
    x = _as_images(model, images)
    r = rollout(attention_weights(model, x, batch_size))
    p = d["prefix"]
    weights = r[:, 0, p:] if p else r[:, :, :].mean(axis=1)
    rows, cols = d["grid"]
    maps = weights.reshape(-1, rows, cols)
    low, high = maps.min(axis=(1, 2), keepdims=True), maps.max(axis=(1, 2), keepdims=True)
    maps = (maps - low) / np.where(high > low, high - low, 1.0)
    # Bilinear at half-pixel centres, no antialiasing (an upsampling: the same numbers on every backend).
    resized = keras.ops.convert_to_numpy(
        keras.ops.image.resize(maps[..., None].astype("float32"), x.shape[1:3], interpolation="bilinear",
                               data_format="channels_last"))[..., 0]
    return np.clip(resized, 0.0, 1.0).astype("float32")


def attention_distance(attentions, grid, pixels_per_patch, num_prefix_tokens):
    """Mean attention distance per layer and head, in pixels (paper Sec. 4.5, Fig. 7 right).

    For each query patch, the distance in pixels to every key patch (between
    patch centres) weighted by the attention it pays to it, summed over keys
    and averaged over query patches and images. Prefix tokens (the class
    token) have no position and are left out as queries and keys.

    Args:
        attentions: list of (batch, heads, seq, seq) arrays.
        grid: (rows, cols) of the patch grid.
        pixels_per_patch: patch side in pixels.
        num_prefix_tokens: 0 or 1.

    Returns:
        float32 (num_layers, num_heads).

    Example:

    >>> eye = np.eye(5)[None, None]             # every patch attends to itself only
    >>> attention_distance([eye], (2, 2), 16, 1).tolist()
    [[0.0]]
    """
    rows, cols = grid
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    centres = np.stack([r.ravel(), c.ravel()], axis=-1) * float(pixels_per_patch)
    distance = np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)  # (N, N) pixels
    out = []
    for a in attentions:
        a = np.asarray(a, dtype="float64")[:, :, num_prefix_tokens:, num_prefix_tokens:]
        if a.shape[-1] != rows * cols:
            raise ValueError(f"Attention over {a.shape[-1]} patches does not fit a {rows}x{cols} grid")
        out.append((a * distance).sum(axis=-1).mean(axis=(0, 2)))
    return np.asarray(out, dtype="float32")


def mean_attention_distance(model, images, batch_size=32):
    """Mean attention distance of every layer and head of `model` on `images`, in pixels (Fig. 7 right).

    Args:
        model, images, batch_size: as `attention_weights`.

    Returns:
        float32 (num_layers, num_heads); pixels of the input image (a
        hybrid's feature-map cells count as their stride in pixels).
    """
    d = _describe(model)
    return attention_distance(attention_weights(model, images, batch_size), d["grid"], d["pixels_per_patch"],
                              d["prefix"])


def position_embedding_similarity(model):
    """Cosine similarity of each patch's position embedding with every other (paper Fig. 7 centre).

    Any position-embedding kind (paper Appendix D.4): the table the model
    adds at its own grid (`PatchEncoder.position_table`), learned or fixed.

    Returns:
        float32 (rows, cols, rows, cols): [i, j] is the map of patch (i, j)'s
        similarity to all patches; values in [-1, 1], 1 on the diagonal.

    Raises:
        ValueError: a model with position_embedding="none" (no table).
    """
    d = _describe(model)
    table = d["encoder"].position_table()
    if table is None:
        raise ValueError(f"Model {model.name!r} has position_embedding='none': it has no position embeddings to compare")
    pe = keras.ops.convert_to_numpy(table).astype("float64")[d["prefix"]:]
    unit = pe / np.maximum(np.linalg.norm(pe, axis=-1, keepdims=True), 1e-12)
    rows, cols = d["grid"]
    return (unit @ unit.T).reshape(rows, cols, rows, cols).astype("float32")


def embedding_filters(model, n=28):
    """The top `n` principal components of the patch-embedding filters (paper Fig. 7 left, 28 shown).

    Each of the hidden_size filters of the linear projection E (paper Eq. 1)
    is a P x P x C image; their principal components (of the centred
    filters, by SVD) are returned as images, strongest first.

    Args:
        model: a pure keras_vit ViT (a hybrid's projection is 1x1 over ResNet
            features, not image-like).
        n: int >= 1, at most min(hidden_size, P * P * C).

    Returns:
        float32 (n, P, P, C), each of unit norm (sign arbitrary).

    Raises:
        ValueError: a hybrid model, or `n` out of range.
    """
    d = _describe(model)
    if d["pixels_per_patch"] != d["patch_size"]:
        raise ValueError("embedding_filters needs a pure ViT: a hybrid's patch projection works on ResNet features")
    n = check_positive_int("n", n)
    p, c = d["patch_size"], d["channels"]
    kernel = np.asarray(d["encoder"].projection.kernel.numpy(), dtype="float64")  # (P*P*C, D)
    filters = kernel.T - kernel.T.mean(axis=0, keepdims=True)
    limit = min(filters.shape)
    if n > limit:
        raise ValueError(f"`n` must be at most {limit} for this model. Received: n={n}")
    _, _, vt = np.linalg.svd(filters, full_matrices=False)
    return vt[:n].reshape(n, p, p, c).astype("float32")


# ----------------------------------------------------------------------------- plotting


def _figure_to_png(fig, path, overwrite=True):
    """Writes `fig` as PNG through a temporary file; never replaces a folder."""
    import matplotlib.pyplot as plt

    from keras_vit._files import staged

    try:
        with staged(str(path), overwrite) as tmp:
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return str(path)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def plot_attention_rollout(images, maps, path, overwrite=True):
    """Writes a PNG of images (top row) and their rollout maps over them (bottom row).

    Args:
        images: (batch, height, width, channels) in [-1, 1].
        maps: (batch, height, width) in [0, 1], from `attention_rollout`.
        path: destination `.png`.

    Returns:
        `path`.
    """
    images = np.asarray(images, dtype="float32")
    maps = np.asarray(maps, dtype="float32")
    if images.ndim == 3 and maps.ndim == 2:  # one image
        images, maps = images[None], maps[None]
    if images.ndim != 4 or len(images) == 0 or maps.shape != images.shape[:3]:
        raise ValueError(
            "`images` must be (batch >= 1, height, width, channels) and `maps` (batch, height, width) to match. "
            f"Received shapes {images.shape} and {maps.shape}"
        )
    plt = _pyplot()
    n = len(images)
    fig, axes = plt.subplots(2, n, figsize=(2 * n, 4), squeeze=False)
    for i in range(n):
        shown = (images[i] + 1) / 2
        shown = shown[..., 0] if shown.shape[-1] == 1 else shown
        axes[0, i].imshow(np.clip(shown, 0, 1), cmap="gray")
        axes[1, i].imshow(np.clip(shown, 0, 1), cmap="gray")
        axes[1, i].imshow(maps[i], cmap="jet", alpha=0.5, vmin=0, vmax=1)
        for ax in axes[:, i]:
            ax.axis("off")
    fig.suptitle("Attention rollout")
    return _figure_to_png(fig, path, overwrite)


def plot_mean_attention_distance(distances, path, image_size=None, overwrite=True):
    """Writes a PNG of mean attention distance per head against depth (the paper's Fig. 7 right).

    Args:
        distances: (num_layers, num_heads) pixels, from `mean_attention_distance`.
        path: destination `.png`.
        image_size: optional, sets the y-axis limit to the image side.
    """
    distances = np.asarray(distances)
    if distances.ndim != 2 or 0 in distances.shape:
        raise ValueError(f"`distances` must be (num_layers >= 1, num_heads >= 1). Received shape {distances.shape}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for head in range(distances.shape[1]):
        ax.scatter(np.arange(distances.shape[0]), distances[:, head], s=12, label=f"head {head}")
    ax.set_xlabel("network depth (layer)")
    ax.set_ylabel("mean attention distance (pixels)")
    if image_size:
        ax.set_ylim(0, image_size)
    ax.set_title("Mean attention distance")
    return _figure_to_png(fig, path, overwrite)


def plot_position_embedding_similarity(similarity, path, overwrite=True):
    """Writes a PNG grid of each patch's position-embedding similarity map (the paper's Fig. 7 centre)."""
    similarity = np.asarray(similarity)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:] or 0 in similarity.shape:
        raise ValueError(f"`similarity` must be (rows, cols, rows, cols). Received shape {similarity.shape}")
    plt = _pyplot()
    rows, cols = similarity.shape[:2]
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 0.8 + 1, rows * 0.8), squeeze=False)
    for i in range(rows):
        for j in range(cols):
            image = axes[i, j].imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis")
            axes[i, j].axis("off")
    fig.colorbar(image, ax=axes, fraction=0.03, label="cosine similarity")
    fig.suptitle("Position embedding similarity")
    return _figure_to_png(fig, path, overwrite)


def plot_embedding_filters(filters, path, overwrite=True):
    """Writes a PNG of principal components of the patch filters (the paper's Fig. 7 left), each scaled to [0, 1]."""
    filters = np.asarray(filters, dtype="float32")
    if filters.ndim != 4 or len(filters) == 0 or filters.shape[-1] not in (1, 3):
        raise ValueError(f"`filters` must be (n >= 1, P, P, 1 or 3). Received shape {filters.shape}")
    plt = _pyplot()
    n = len(filters)
    cols = min(n, 7)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(cols, rows), squeeze=False)
    for k, ax in enumerate(axes.ravel()):
        ax.axis("off")
        if k < n:
            f = filters[k]
            f = (f - f.min()) / max(f.max() - f.min(), 1e-12)
            ax.imshow(f[..., 0] if f.shape[-1] == 1 else f, cmap="gray")
    fig.suptitle("RGB embedding filters (principal components)")
    return _figure_to_png(fig, path, overwrite)


# ----------------------------------------------------------------------------- masked patch prediction


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
    from keras_vit._backend import tensorflow

    tf = tensorflow("inspect.masked_patch_prediction (keras_vit.pretraining's targets and corruption)")
    from keras_vit import pretraining

    if not isinstance(model, pretraining.MaskedPatchPrediction) or model.target != "mean_color":
        raise ValueError(
            "`model` must be a keras_vit.pretraining.MaskedPatchPrediction with target='mean_color'. Received: "
            f"model={getattr(model, 'name', model)!r} of type {type(model).__name__}"
            + (f" with target={model.target!r}" if isinstance(model, pretraining.MaskedPatchPrediction) else ""))
    x = _as_images(model.backbone, images)
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
    plt = _pyplot()
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
    return _figure_to_png(fig, path, overwrite)
