"""Position-embedding tables and their resampling, in `keras.ops` (ViT paper, Sec. 3.1, 3.2, Appendix D.4).

The interpolation matrices reproduce `keras_vit.weights.resample_position_embedding`
exactly (one 2D resampling = one matrix per axis, since both rules are
separable), so a model that resamples its table at call time computes what a
model whose table was resampled once offline computes:

- "bilinear": scipy's `ndimage.zoom(order=1)`, corner-aligned: output i of n
  sits at input coordinate i * (m - 1) / (n - 1) (0 when n = 1), weights
  max(0, 1 - |coordinate - j|) (the reference code's rule,
  google-research/vision_transformer `checkpoint.py`).
- "bicubic": TensorFlow's `ResizeBicubic` with half-pixel centres (what
  `tf.image.resize(method="bicubic")` calls): coordinate (i + 0.5) m / n - 0.5,
  Keys' cubic kernel with a = -0.5 at the 4 nearest taps, the fractional offset
  rounded to a 1024-step table as TensorFlow does, taps outside the grid
  dropped and the rest renormalised.
"""

import numpy as np
from keras import ops

POSITION_EMBEDDINGS = ("learned", "learned_2d", "sincos_2d", "none")
INTERPOLATIONS = ("bilinear", "bicubic")
SINCOS_TEMPERATURE = 10_000.0
_KEYS_A = -0.5
_TABLE_STEPS = 1024


def _keys_cubic(d):
    """Keys' cubic convolution kernel (a = -0.5) at distances d >= 0 (tensor)."""
    a = _KEYS_A
    near = ((a + 2.0) * d - (a + 3.0)) * d * d + 1.0
    far = ((a * d - 5.0 * a) * d + 8.0 * a) * d - 4.0 * a
    return ops.where(d <= 1.0, near, ops.where(d < 2.0, far, ops.zeros_like(d)))


def interpolation_matrix(out_size, in_size, interpolation="bilinear"):
    """Returns the (out_size, in_size) float32 matrix that resamples one axis of a grid.

    `out_size` and `in_size` are ints or scalar int tensors (dynamic shapes
    under `tf.function`/XLA). Row i holds the weights of output cell i over
    the input cells; each row sums to 1. See the module docstring for the two
    rules and their sources.
    """
    n = ops.cast(out_size, "float32")
    m = ops.cast(in_size, "float32")
    i = ops.cast(ops.arange(out_size), "float32")[:, None]
    j = ops.cast(ops.arange(in_size), "float32")[None, :]
    if interpolation == "bilinear":
        coordinate = i * (m - 1.0) / ops.maximum(n - 1.0, 1.0)
        return ops.maximum(1.0 - ops.abs(coordinate - j), 0.0)
    coordinate = (i + 0.5) * (m / n) - 0.5
    floor = ops.floor(coordinate)
    offset = ops.round((coordinate - floor) * _TABLE_STEPS) / _TABLE_STEPS
    weights = 0.0
    for tap in (-1.0, 0.0, 1.0, 2.0):
        hit = ops.cast(ops.equal(j, floor + tap), "float32")  # taps outside the grid hit nothing
        weights = weights + hit * _keys_cubic(ops.abs(offset - tap))
    return weights / ops.sum(weights, axis=1, keepdims=True)


def resample_grid(table, source_grid, target_grid, interpolation="bilinear"):
    """Resamples a (rows * cols, D) row-major patch table to another grid.

    Args:
        table: float tensor (source rows * source cols, D).
        source_grid: (rows, cols) ints of `table`.
        target_grid: (rows, cols), ints or scalar int tensors.
        interpolation: "bilinear" or "bicubic" (module docstring).

    Returns:
        float32 tensor (target rows * target cols, D).
    """
    rows, cols = source_grid
    grid = ops.reshape(ops.cast(table, "float32"), (rows, cols, -1))
    row_weights = interpolation_matrix(target_grid[0], rows, interpolation)
    col_weights = interpolation_matrix(target_grid[1], cols, interpolation)
    grid = ops.einsum("ar,bc,rcd->abd", row_weights, col_weights, grid)
    return ops.reshape(grid, (target_grid[0] * target_grid[1], ops.shape(table)[-1]))


def resample_axis(table, target_size, interpolation="bilinear"):
    """Resamples a (size, D) table of one grid axis to `target_size` rows (same rules)."""
    weights = interpolation_matrix(target_size, ops.shape(table)[0], interpolation)
    return ops.matmul(weights, ops.cast(table, "float32"))


def sincos_2d(rows, cols, hidden_size, temperature=SINCOS_TEMPERATURE):
    """Fixed 2D sine-cosine position embeddings, (rows * cols, hidden_size) float32.

    big_vision's `posemb_sincos_2d` (google-research/big_vision,
    `models/vit.py`), as used by MAE: with omega_k = temperature^(-k / (D/4 - 1)),
    k = 0..D/4 - 1, the patch at (y, x) gets
    [sin(x omega), cos(x omega), sin(y omega), cos(y omega)], patches
    row-major. `hidden_size` must be a multiple of 4 and at least 8 (checked
    by `PatchEncoder`). `rows` and `cols` may be scalar int tensors.
    """
    quarter = hidden_size // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype="float64") / (quarter - 1))
    omega = ops.convert_to_tensor(omega.astype("float32"))
    y = ops.cast(ops.arange(rows), "float32")
    x = ops.cast(ops.arange(cols), "float32")
    y = ops.reshape(ops.broadcast_to(y[:, None], (rows, cols)), (-1,))[:, None] * omega[None, :]
    x = ops.reshape(ops.broadcast_to(x[None, :], (rows, cols)), (-1,))[:, None] * omega[None, :]
    return ops.concatenate([ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=1)
