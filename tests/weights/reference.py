"""Independent references for the weight tests; shares no code with keras_vit.weights.

- `google_checkpoint`: random arrays under the key names and shapes of Google's
  original `.npz` files, written from the table in CHECKPOINTS.md.
- `forward`: the ViT forward pass straight from the paper's equations
  (arXiv:2010.11929, Eq. 1-4) in NumPy over such arrays; with
  `no_embed_class=True`, the embedding step of timm's `no_embed_class` models
  (timm `VisionTransformer._pos_embed`: `x = x + pos_embed`, then the class
  token is concatenated in front) and big_vision's `vit.py`.
- `zoom_patch_rows`: the reference code's position-embedding resampling
  (`scipy.ndimage.zoom(grid, zoom, order=1)`, google-research/vision_transformer).
- `keys_cubic_resize`: bicubic resampling written from Keys (1981), in float64.
"""

import numpy as np
import scipy.ndimage
from scipy.special import erf


def google_checkpoint(seed, patch=4, channels=3, width=32, layers=2, heads=4, mlp=64, grid=(4, 4), classes=5,
                      representation=None, cls=True, class_row=True):
    """Random float32 arrays in the pre-linen layout of google-research/vision_transformer.

    `class_row=False` leaves the class token's row out of the position table
    (rows for the patches only, as timm's `no_embed_class` models and big_vision).
    """
    rng = np.random.default_rng(seed)

    def r(*shape, scale=0.2):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    hd = width // heads
    tokens = grid[0] * grid[1] + int(cls and class_row)
    a = {
        "embedding/kernel": r(patch, patch, channels, width),
        "embedding/bias": r(width),
        "Transformer/posembed_input/pos_embedding": r(1, tokens, width),
        "Transformer/encoder_norm/scale": 1 + r(width),
        "Transformer/encoder_norm/bias": r(width),
    }
    if cls:
        a["cls"] = r(1, 1, width)
    for i in range(layers):
        b = f"Transformer/encoderblock_{i}"
        for ln in ("LayerNorm_0", "LayerNorm_2"):
            a[f"{b}/{ln}/scale"] = 1 + r(width)
            a[f"{b}/{ln}/bias"] = r(width)
        for n in ("query", "key", "value"):
            a[f"{b}/MultiHeadDotProductAttention_1/{n}/kernel"] = r(width, heads, hd)
            a[f"{b}/MultiHeadDotProductAttention_1/{n}/bias"] = r(heads, hd)
        a[f"{b}/MultiHeadDotProductAttention_1/out/kernel"] = r(heads, hd, width)
        a[f"{b}/MultiHeadDotProductAttention_1/out/bias"] = r(width)
        a[f"{b}/MlpBlock_3/Dense_0/kernel"] = r(width, mlp)
        a[f"{b}/MlpBlock_3/Dense_0/bias"] = r(mlp)
        a[f"{b}/MlpBlock_3/Dense_1/kernel"] = r(mlp, width)
        a[f"{b}/MlpBlock_3/Dense_1/bias"] = r(width)
    top = width
    if representation:
        a["pre_logits/kernel"] = r(width, representation)
        a["pre_logits/bias"] = r(representation)
        top = representation
    if classes:
        a["head/kernel"] = r(top, classes)
        a["head/bias"] = r(classes)
    return a


def _layer_norm(x, scale, bias, eps=1e-6):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * scale + bias


def _gelu(x):
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def forward(a, images, layers, no_embed_class=False, eps=1e-6):
    """Logits (batch, classes) of a token-classifier ViT, float64, from Google-layout arrays `a`.

    images: (batch, H, W, C) in whatever range the weights expect.
    no_embed_class: the position table has rows for the patches only and is
        added before the class token is prepended (timm, big_vision).
    eps: LayerNorm epsilon (1e-6 in the JAX originals, 1e-12 in Hugging Face configs).
    """
    x = np.asarray(images, np.float64)
    kernel = a["embedding/kernel"].astype(np.float64)
    p = kernel.shape[0]
    b, h, w, c = x.shape
    # Eq. 1: x_p (N, P^2 C) patches, row-major grid, each flattened (row, col, channel) like a conv kernel.
    patches = x.reshape(b, h // p, p, w // p, p, c).transpose(0, 1, 3, 2, 4, 5).reshape(b, -1, p * p * c)
    z = patches @ kernel.reshape(p * p * c, -1) + a["embedding/bias"]
    cls = np.broadcast_to(a["cls"], (b, 1, z.shape[-1]))
    if no_embed_class:  # timm: x = x + pos_embed; x = cat(cls_token, x)
        z = np.concatenate([cls, z + a["Transformer/posembed_input/pos_embedding"]], axis=1)
    else:
        z = np.concatenate([cls, z], axis=1) + a["Transformer/posembed_input/pos_embedding"]
    for i in range(layers):
        pre = f"Transformer/encoderblock_{i}"
        att = f"{pre}/MultiHeadDotProductAttention_1"
        # Eq. 2: z' = MSA(LN(z)) + z
        y = _layer_norm(z, a[f"{pre}/LayerNorm_0/scale"], a[f"{pre}/LayerNorm_0/bias"], eps)
        q = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/query/kernel"]) + a[f"{att}/query/bias"][:, None, :]
        k = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/key/kernel"]) + a[f"{att}/key/bias"][:, None, :]
        v = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/value/kernel"]) + a[f"{att}/value/bias"][:, None, :]
        weights = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
        heads = weights @ v
        z = np.einsum("bhnk,hkd->bnd", heads, a[f"{att}/out/kernel"]) + a[f"{att}/out/bias"] + z
        # Eq. 3: z = MLP(LN(z')) + z'
        y = _layer_norm(z, a[f"{pre}/LayerNorm_2/scale"], a[f"{pre}/LayerNorm_2/bias"], eps)
        y = _gelu(y @ a[f"{pre}/MlpBlock_3/Dense_0/kernel"] + a[f"{pre}/MlpBlock_3/Dense_0/bias"])
        z = y @ a[f"{pre}/MlpBlock_3/Dense_1/kernel"] + a[f"{pre}/MlpBlock_3/Dense_1/bias"] + z
    # Eq. 4: y = LN(z_L^0)
    rep = _layer_norm(z[:, 0], a["Transformer/encoder_norm/scale"], a["Transformer/encoder_norm/bias"], eps)
    if "pre_logits/kernel" in a:
        rep = np.tanh(rep @ a["pre_logits/kernel"] + a["pre_logits/bias"])
    return rep @ a["head/kernel"] + a["head/bias"]


def zoom_patch_rows(table, source, target):
    """Resamples (1, rows * cols, D) patch rows from grid `source` to `target` as the reference code does.

    google-research/vision_transformer `checkpoint.py` (and vit-keras'
    `apply_embedding_weights`): `scipy.ndimage.zoom(grid, zoom, order=1)`,
    corner-aligned linear interpolation, no antialiasing.
    """
    grid = np.asarray(table)[0].reshape(source[0], source[1], -1)
    out = scipy.ndimage.zoom(grid, (target[0] / source[0], target[1] / source[1], 1), order=1)
    return out.reshape(1, target[0] * target[1], -1)


def _keys(t, a=-0.5):
    """Keys' cubic convolution kernel (IEEE Trans. ASSP 29(6), 1981, Eq. 15) with a = -0.5."""
    t = np.abs(t)
    near = (a + 2) * t**3 - (a + 3) * t**2 + 1
    far = a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def _cubic_weights(n_in, n_out, antialias, table_size):
    """(n_out, n_in) weights of one axis: half-pixel centres, taps outside the input dropped, rows summing to 1."""
    scale = n_out / n_in
    widen = 1.0 / scale if antialias and scale < 1 else 1.0  # antialiasing: the kernel stretched over 1/scale pixels
    m = np.zeros((n_out, n_in))
    for i in range(n_out):
        centre = (i + 0.5) / scale - 0.5
        if table_size:  # sub-pixel offsets rounded to a table of `table_size` steps per pixel
            whole = np.floor(centre)
            centre = whole + np.rint((centre - whole) * table_size) / table_size
        for j in range(int(np.floor(centre - 2 * widen)), int(np.ceil(centre + 2 * widen)) + 1):
            if 0 <= j < n_in:
                m[i, j] += _keys((j - centre) / widen)
    return m / m.sum(1, keepdims=True)


def keys_cubic_resize(grid, target, antialias, table_size=None):
    """Separable bicubic resize of a (rows, cols, D) grid to `target` (rows, cols), float64.

    The Keys kernel (a = -0.5) at half-pixel centres; taps that fall outside
    the grid are dropped and the remaining weights renormalised to sum to 1.
    `antialias=True` widens the kernel by the scale when downsampling (as
    PIL's `Image.resize(..., BICUBIC)` does). `table_size`: round each output
    pixel's sub-pixel offset to 1/table_size of a pixel (a coefficient table).
    """
    grid = np.asarray(grid, np.float64)
    rows = _cubic_weights(grid.shape[0], target[0], antialias, table_size)
    cols = _cubic_weights(grid.shape[1], target[1], antialias, table_size)
    return np.einsum("ij,jkd,lk->ild", rows, grid, cols)
