"""The paper's inspection tools (Sec. 4.5, Figures 6, 7 and 14); public as `keras_vit.inspect.*`.

    attention_weights(model, images)          per layer (batch, heads, seq, seq)
    attention_rollout(model, images)          one map per image at the input resolution (Fig. 6, 14)
    mean_attention_distance(model, images)    (layers, heads) in pixels (Fig. 7 right)
    position_embedding_similarity(model)      (rows, cols, rows, cols) cosines (Fig. 7 centre)
    embedding_filters(model, n)               top principal components of the patch filters (Fig. 7 left)
    plot_*(..., path)                         PNG figures of each (matplotlib)

The pure-array functions `rollout` and `attention_distance` hold the
mathematics and take plain NumPy arrays.
"""

import keras
import numpy as np

from keras_vit.common.validation import check_positive_int


def _describe(model):
    from keras_vit.weights.loader import describe, resnet_num_layers

    d = describe(model)
    stride = 1
    stages = resnet_num_layers(model)
    if stages:
        from keras_vit.models.resnet import output_stride

        stride = output_stride(stages)
    d["pixels_per_patch"] = d["patch_size"] * stride
    d["prefix"] = d["encoder"].prefix_tokens
    return d


def as_images(model, images):
    """`images` as a float32 batch `(n, *model.input_shape[1:])` (one image gains a batch axis).

    Raises:
        ValueError: the images do not have the model's input shape, or there are none.
    """
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
    x = as_images(model, images)
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
    x = as_images(model, images)
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
        num_prefix_tokens: 0, 1 (class token) or 2 (and DeiT's distillation token).

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


def figure_to_png(fig, path, overwrite=True):
    """Writes `fig` as PNG through a temporary file; never replaces a folder."""
    import matplotlib.pyplot as plt

    from keras_vit.common.files import staged

    try:
        with staged(str(path), overwrite) as tmp:
            fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return str(path)


def pyplot():
    """matplotlib.pyplot on the Agg backend unless one was chosen already (figures are written, never shown)."""
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
    plt = pyplot()
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
    return figure_to_png(fig, path, overwrite)


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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    for head in range(distances.shape[1]):
        ax.scatter(np.arange(distances.shape[0]), distances[:, head], s=12, label=f"head {head}")
    ax.set_xlabel("network depth (layer)")
    ax.set_ylabel("mean attention distance (pixels)")
    if image_size:
        ax.set_ylim(0, image_size)
    ax.set_title("Mean attention distance")
    return figure_to_png(fig, path, overwrite)


def plot_position_embedding_similarity(similarity, path, overwrite=True):
    """Writes a PNG grid of each patch's position-embedding similarity map (the paper's Fig. 7 centre)."""
    similarity = np.asarray(similarity)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:] or 0 in similarity.shape:
        raise ValueError(f"`similarity` must be (rows, cols, rows, cols). Received shape {similarity.shape}")
    plt = pyplot()
    rows, cols = similarity.shape[:2]
    fig, axes = plt.subplots(rows, cols, figsize=(cols * 0.8 + 1, rows * 0.8), squeeze=False)
    for i in range(rows):
        for j in range(cols):
            image = axes[i, j].imshow(similarity[i, j], vmin=-1, vmax=1, cmap="viridis")
            axes[i, j].axis("off")
    fig.colorbar(image, ax=axes, fraction=0.03, label="cosine similarity")
    fig.suptitle("Position embedding similarity")
    return figure_to_png(fig, path, overwrite)


def plot_embedding_filters(filters, path, overwrite=True):
    """Writes a PNG of principal components of the patch filters (the paper's Fig. 7 left), each scaled to [0, 1]."""
    filters = np.asarray(filters, dtype="float32")
    if filters.ndim != 4 or len(filters) == 0 or filters.shape[-1] not in (1, 3):
        raise ValueError(f"`filters` must be (n >= 1, P, P, 1 or 3). Received shape {filters.shape}")
    plt = pyplot()
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
    return figure_to_png(fig, path, overwrite)

