"""Position-embedding resampling for a new patch grid (ViT paper, Sec. 3.2)."""

import math

import numpy as np

from keras_vit.common.validation import check_bool, check_choice, is_int

INTERPOLATIONS = ("bilinear", "bicubic")


def grid_shape(num_patches, grid=None, name="grid"):
    """Returns the (rows, cols) patch grid of a position embedding with `num_patches` patch rows.

    `grid` (rows, cols) is used when given and must multiply to
    `num_patches`; without it the grid must be square (the published
    checkpoints all are).

    Raises:
        ValueError: `num_patches` is below 1, `grid` does not fit, or no
            square grid has `num_patches` cells.
    """
    if not is_int(num_patches) or num_patches < 1:
        raise ValueError(f"A position embedding needs at least one patch row; it has {num_patches!r}")
    if grid is not None:
        grid = tuple(grid) if isinstance(grid, (tuple, list, np.ndarray)) else (grid,)
        if len(grid) != 2 or not all(is_int(g) and g > 0 for g in grid) or grid[0] * grid[1] != num_patches:
            raise ValueError(
                f"`{name}` must be (rows, cols) with rows * cols = {num_patches} patches. Received: {name}={grid!r}"
            )
        return int(grid[0]), int(grid[1])
    side = math.isqrt(num_patches)
    if side * side != num_patches:
        raise ValueError(
            f"The checkpoint's {num_patches} position embeddings do not form a square grid; "
            f"pass `{name}=(rows, cols)`."
        )
    return side, side


def resample_position_embedding(
    position_embedding, target_grid, num_prefix_tokens, source_grid=None, interpolation="bilinear", antialias=False
):
    """Resamples learned 1D position embeddings to another 2D patch grid.

    The paper's fine-tuning at higher resolution (arXiv:2010.11929, Sec. 3.2):
    "we perform 2D interpolation of the pre-trained position embeddings,
    according to their location in the original image". The prefix rows
    (the class token's) are kept as they are; the patch rows are laid out on
    their (rows, cols) grid, row-major as `Patches` orders them, resampled,
    and flattened back.

    `interpolation="bilinear"` (default) is the reference code's
    `scipy.ndimage.zoom(grid, zoom, order=1)` (google-research/
    vision_transformer `checkpoint.py`, vit-keras `apply_embedding_weights`):
    corner-aligned linear interpolation, no antialiasing. `"bicubic"` uses
    `tf.image.resize(method="bicubic", antialias=antialias)`: Keys' cubic
    kernel (a = -0.5) at half-pixel centres, taps outside the grid dropped
    and the rest renormalised. With `antialias=True` the kernel is widened by
    the scale when downsampling; this equals PIL's `Image.resize(BICUBIC)`
    and PyTorch's `interpolate(mode="bicubic", antialias=True)`, which timm's
    `resample_abs_pos_embed` calls by default (within 4e-6 on unit-variance
    tables, tests/weights/test_resample.py). Without it, TensorFlow rounds
    sub-pixel offsets to a 1024-step table (up to 2e-3 from the exact
    kernel) and does not widen the kernel; this is not timm's
    `antialias=False` (PyTorch's bicubic uses a = -0.75 and clamps at the
    border: up to 0.3 apart on such tables).

    Args:
        position_embedding: array (1, num_prefix_tokens + rows * cols, D) or
            (num_prefix_tokens + rows * cols, D), any float dtype.
        target_grid: (rows, cols) of the new grid, ints >= 1.
        num_prefix_tokens: 0, 1 or 2: rows before the grid (the class token,
            and DeiT's distillation token), kept as they are; decided by the
            caller from the checkpoint (never guessed).
        source_grid: optional (rows, cols) of the old grid; default square.
        interpolation: "bilinear" or "bicubic".
        antialias: bool; only with "bicubic" (the reference bilinear has none).

    Backends: NumPy in, NumPy out, on every Keras backend; "bicubic" needs
    TensorFlow installed (its kernel is TensorFlow's), "bilinear" only SciPy.

    Returns:
        float32 array (1, num_prefix_tokens + target rows * cols, D).

    Raises:
        ValueError: a bad argument (named), grids that do not fit the
            array, or an array with no patch rows.
        ImportError: "bicubic" without TensorFlow installed (names the extra).

    Example:

    >>> pe = np.arange(1 + 4, dtype="float32").reshape(1, 5, 1)
    >>> resample_position_embedding(pe, (3, 3), 1)[0, :, 0].tolist()
    [0.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0, 3.0, 3.5, 4.0]
    """
    check_choice("interpolation", interpolation, INTERPOLATIONS)
    check_bool("antialias", antialias)
    if antialias and interpolation != "bicubic":
        raise ValueError("`antialias=True` needs interpolation='bicubic' (the reference bilinear has no antialiasing)")
    if num_prefix_tokens not in (0, 1, 2) or isinstance(num_prefix_tokens, bool):
        raise ValueError(f"`num_prefix_tokens` must be 0, 1 or 2. Received: num_prefix_tokens={num_prefix_tokens!r}")
    pe = np.asarray(position_embedding, dtype=np.float32)
    if pe.ndim == 3 and pe.shape[0] == 1:
        pe = pe[0]
    if pe.ndim != 2:
        raise ValueError(
            f"`position_embedding` must have shape (1, tokens, D) or (tokens, D). Received shape {np.shape(position_embedding)}"
        )
    target_grid = tuple(target_grid)
    if len(target_grid) != 2 or not all(is_int(g) and g > 0 for g in target_grid):
        raise ValueError(f"`target_grid` must be (rows, cols) of positive ints. Received: target_grid={target_grid!r}")
    prefix, patches = pe[:num_prefix_tokens], pe[num_prefix_tokens:]
    if len(patches) < 1:
        raise ValueError(
            f"`position_embedding` has {len(pe)} rows, none left for patches after num_prefix_tokens="
            f"{num_prefix_tokens}. Received shape {np.shape(position_embedding)}"
        )
    rows, cols = grid_shape(len(patches), source_grid, "source_grid")
    grid = patches.reshape(rows, cols, -1)
    new_rows, new_cols = int(target_grid[0]), int(target_grid[1])
    if (rows, cols) != (new_rows, new_cols):
        if interpolation == "bilinear":
            import scipy.ndimage

            grid = scipy.ndimage.zoom(grid, (new_rows / rows, new_cols / cols, 1), order=1)
        else:
            from keras_vit.common.backend import tensorflow

            tf = tensorflow("interpolation='bicubic' (TensorFlow's bicubic kernel; the default 'bilinear' needs only SciPy)")
            grid = tf.image.resize(grid, (new_rows, new_cols), method="bicubic", antialias=antialias).numpy()
    if grid.shape[:2] != (new_rows, new_cols):  # scipy rounds the zoomed shape
        raise ValueError(f"Resampling gave a {grid.shape[:2]} grid instead of {(new_rows, new_cols)}")
    return np.concatenate([prefix, grid.reshape(new_rows * new_cols, -1)], axis=0)[None].astype(np.float32)
