"""The ViT variants of the paper's Table 1 (plus the AugReg Ti and S sizes).

Table 1 of arXiv:2010.11929 gives Base, Large and Huge; Tiny and Small are
the sizes of "How to train your ViT?" (Steiner et al. 2021, AugReg) and DeiT.
Each builder `ViT{size}{patch}` is `VisionTransformer` with one row of this
table and the given patch size.
"""

from keras_vit.models.resnet import output_stride as resnet_output_stride
from keras_vit.models.vit import VisionTransformer

# size -> (hidden_size, num_layers, num_heads, mlp_dim)
SIZES = {
    "Ti": (192, 12, 3, 768),
    "S": (384, 12, 6, 1536),
    "B": (768, 12, 12, 3072),
    "L": (1024, 24, 16, 4096),
    "H": (1280, 32, 16, 5120),
}

# hybrid builder name -> (size, ResNet units per stage); the patches are 1x1 cells of the ResNet feature map
# (the configurations of google-research/vision_transformer `configs/models.py`).
HYBRID_VARIANTS = {
    "ViTR26S32": ("S", (2, 2, 2, 2)),
    "ViTR50B16": ("B", (3, 4, 9)),
    "ViTR50L32": ("L", (3, 4, 6, 3)),
}
# builder name -> (size, patch_size)
VARIANTS = {
    "ViTTi16": ("Ti", 16),
    "ViTS16": ("S", 16),
    "ViTS32": ("S", 32),
    "ViTB8": ("B", 8),
    "ViTB16": ("B", 16),
    "ViTB32": ("B", 32),
    "ViTL16": ("L", 16),
    "ViTL32": ("L", 32),
    "ViTH14": ("H", 14),
}

_TABLE_ARGS = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "resnet_num_layers",
               "resnet_width_factor")

_DOC = """Builds {title} (hidden_size {hidden}, {layers} layers, {heads} heads, mlp_dim {mlp}).

    A thin wrapper of `keras_vit.VisionTransformer` with the ViT-{size} row of
    the variant table (paper arXiv:2010.11929, Table 1; Ti and S from
    AugReg/DeiT) and {source}. Arguments follow `keras.applications`.

    Args:
        include_top: bool, default True. Include the classification head.
        weights: None (random initialisation), "imagenet" (ImageNet-21k
            pre-trained, ImageNet-1k fine-tuned), "imagenet21k", a name from
            `keras_vit.weights.CHECKPOINTS`, a checkpoint file (.npz,
            .safetensors) or a Keras `.weights.h5` file (see
            `VisionTransformer`).
        input_tensor: optional Keras tensor to use as image input.
        input_shape: (height, width, channels), default (224, 224, 3); height
            and width must be multiples of {patch}.
        pooling: with `include_top=False`: None (sequence output), "token",
            "avg" or "max".
        classes: int, number of classes, default 1000.
        classifier_activation: head activation, default "softmax"; None for
            logits.
        name: model name, default "{default_name}".
        include_preprocessing: bool, default False: True scales raw pixels
            in [0, 255] inside the model (a first `Rescaling` layer, x /
            127.5 - 1), as `keras.applications`' EfficientNetV2 does.
        **kwargs: other `VisionTransformer` options: class_names, representation_size,
            classifier, class_token, dropout_rate, attention_dropout_rate,
            stochastic_depth_rate, layer_norm_epsilon, approximate_gelu.

    Input: `(batch, height, width, channels)` float32 images in [-1, 1]
    (see `keras_vit.preprocess_input`), or raw pixels in [0, 255] with
    `include_preprocessing=True`.

    Output: `(batch, classes)` float32 with the head; otherwise
    `(batch, seq_len, {hidden})` or `(batch, {hidden})` with `pooling`.

    Raises:
        ValueError: `keras.config.image_data_format()` is "channels_first"
            (keras_vit is channels-last only), before anything is built; an
            invalid argument (see `VisionTransformer`), or a kwarg that would
            override the variant table ({table_args}).

    Returns:
        A `keras.Model`.
"""


def find_variant(patch_size, hidden_size, num_layers, num_heads, mlp_dim, resnet_num_layers=None):
    """Returns the builder name of a configuration ("ViTB16", "ViTR50B16"), or None."""
    size = next((k for k, v in SIZES.items() if v == (hidden_size, num_layers, num_heads, mlp_dim)), None)
    if size is None:
        return None
    if resnet_num_layers is None:
        return next((n for n, v in VARIANTS.items() if v == (size, patch_size)), None)
    if patch_size != 1:
        return None
    return next((n for n, v in HYBRID_VARIANTS.items() if v == (size, tuple(resnet_num_layers))), None)


def _make_builder(builder_name, size, patch_size, resnet_num_layers=None):
    hidden_size, num_layers, num_heads, mlp_dim = SIZES[size]
    hybrid = {} if resnet_num_layers is None else {"resnet_num_layers": resnet_num_layers}
    default_name = builder_name.lower().replace("vit", "vit_", 1)

    def builder(
        include_top=True,
        weights=None,
        input_tensor=None,
        input_shape=None,
        pooling=None,
        classes=1000,
        classifier_activation="softmax",
        name=default_name,
        include_preprocessing=False,
        **kwargs,
    ):
        fixed = sorted(set(kwargs) & set(_TABLE_ARGS))
        if fixed:
            raise ValueError(
                f"{builder_name} fixes {', '.join(_TABLE_ARGS)}; use keras_vit.VisionTransformer "
                f"to change them. Received: {', '.join(f'{k}={kwargs[k]!r}' for k in fixed)}"
            )
        return VisionTransformer(
            patch_size=patch_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            include_top=include_top,
            weights=weights,
            input_tensor=input_tensor,
            input_shape=input_shape,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            name=name,
            include_preprocessing=include_preprocessing,
            **hybrid,
            **kwargs,
        )

    builder.__name__ = builder.__qualname__ = builder_name
    builder.__module__ = __name__
    if resnet_num_layers is None:
        title, source, patch = f"ViT-{size}/{patch_size}", f"patch size {patch_size}", patch_size
    else:
        stride = resnet_output_stride(resnet_num_layers)
        depth = 2 + 3 * sum(resnet_num_layers)  # R26 = (2, 2, 2, 2); R50 = (3, 4, 6, 3), also cut to (3, 4, 9)
        title = f"R{depth}+ViT-{size}/{stride}"
        source = (f"the hybrid's ResNet stages {tuple(resnet_num_layers)} (paper Sec. 3.1, output stride {stride}) "
                  "as patch source, one patch per feature-map cell")
        patch = stride
    builder.__doc__ = _DOC.format(
        title=title,
        source=source,
        size=size,
        patch=patch,
        hidden=hidden_size,
        layers=num_layers,
        heads=num_heads,
        mlp=mlp_dim,
        default_name=default_name,
        table_args=", ".join(_TABLE_ARGS),
    )
    return builder


ViTTi16 = _make_builder("ViTTi16", *VARIANTS["ViTTi16"])
ViTS16 = _make_builder("ViTS16", *VARIANTS["ViTS16"])
ViTS32 = _make_builder("ViTS32", *VARIANTS["ViTS32"])
ViTB8 = _make_builder("ViTB8", *VARIANTS["ViTB8"])
ViTB16 = _make_builder("ViTB16", *VARIANTS["ViTB16"])
ViTB32 = _make_builder("ViTB32", *VARIANTS["ViTB32"])
ViTL16 = _make_builder("ViTL16", *VARIANTS["ViTL16"])
ViTL32 = _make_builder("ViTL32", *VARIANTS["ViTL32"])
ViTH14 = _make_builder("ViTH14", *VARIANTS["ViTH14"])
ViTR26S32 = _make_builder("ViTR26S32", "S", 1, HYBRID_VARIANTS["ViTR26S32"][1])
ViTR50B16 = _make_builder("ViTR50B16", "B", 1, HYBRID_VARIANTS["ViTR50B16"][1])
ViTR50L32 = _make_builder("ViTR50L32", "L", 1, HYBRID_VARIANTS["ViTR50L32"][1])
