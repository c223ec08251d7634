"""ViT model builders: the generic `VisionTransformer` and the variant table."""

from keras_vit.models.variants import (
    SIZES,
    VARIANTS,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
    HYBRID_VARIANTS,
)
from keras_vit.models.vit import VisionTransformer

__all__ = [
    "SIZES",
    "VARIANTS",
    "VisionTransformer",
    "ViTTi16",
    "ViTS16",
    "ViTS32",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTL16",
    "ViTL32",
    "ViTH14",
    "ViTR26S32",
    "ViTR50B16",
    "ViTR50L32",
    "HYBRID_VARIANTS",
]
