"""Independent references for the weight tests; shares no code with keras_vit.weights.

- `google_checkpoint`: random arrays under the key names and shapes of Google's
  original `.npz` files, written from the table in CHECKPOINTS.md.
- `forward`: the ViT forward pass straight from the paper's equations
  (arXiv:2010.11929, Eq. 1-4) in NumPy over such arrays; with
  `no_embed_class=True`, the embedding step of timm's `no_embed_class` models
  (timm `VisionTransformer._pos_embed`: `x = x + pos_embed`, then the class
  token is concatenated in front) and big_vision's `vit.py`.
"""

import numpy as np
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


def forward(a, images, layers, no_embed_class=False):
    """Logits (batch, classes) of a token-classifier ViT, float64, from Google-layout arrays `a`.

    images: (batch, H, W, C) in whatever range the weights expect.
    no_embed_class: the position table has rows for the patches only and is
        added before the class token is prepended (timm, big_vision).
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
        y = _layer_norm(z, a[f"{pre}/LayerNorm_0/scale"], a[f"{pre}/LayerNorm_0/bias"])
        q = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/query/kernel"]) + a[f"{att}/query/bias"][:, None, :]
        k = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/key/kernel"]) + a[f"{att}/key/bias"][:, None, :]
        v = np.einsum("bnd,dhk->bhnk", y, a[f"{att}/value/kernel"]) + a[f"{att}/value/bias"][:, None, :]
        weights = _softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]))
        heads = weights @ v
        z = np.einsum("bhnk,hkd->bnd", heads, a[f"{att}/out/kernel"]) + a[f"{att}/out/bias"] + z
        # Eq. 3: z = MLP(LN(z')) + z'
        y = _layer_norm(z, a[f"{pre}/LayerNorm_2/scale"], a[f"{pre}/LayerNorm_2/bias"])
        y = _gelu(y @ a[f"{pre}/MlpBlock_3/Dense_0/kernel"] + a[f"{pre}/MlpBlock_3/Dense_0/bias"])
        z = y @ a[f"{pre}/MlpBlock_3/Dense_1/kernel"] + a[f"{pre}/MlpBlock_3/Dense_1/bias"] + z
    # Eq. 4: y = LN(z_L^0)
    rep = _layer_norm(z[:, 0], a["Transformer/encoder_norm/scale"], a["Transformer/encoder_norm/bias"])
    if "pre_logits/kernel" in a:
        rep = np.tanh(rep @ a["pre_logits/kernel"] + a["pre_logits/bias"])
    return rep @ a["head/kernel"] + a["head/bias"]
