"""The three layers of ViT: `Patches`, `PatchEncoder`, `TransformerBlock`, plus `ImageSizeCheck` (models of any resolution), `SequencePooling`, the head `ClassifierHead` (Dense with class names) and DeiT's `DistilledHead`, the hybrid's `StdConv2D` and the integer-only-friendly `LayerNormalization` / `GroupNormalization`."""

from keras_vit.layers.classifier_head import ClassifierHead, model_class_names, set_model_class_names
from keras_vit.layers.distilled_head import DistilledHead
from keras_vit.layers.normalization import GroupNormalization, LayerNormalization
from keras_vit.layers.patch_encoder import PatchEncoder
from keras_vit.layers.patches import ImageSizeCheck, Patches
from keras_vit.layers.sequence_pooling import SequencePooling
from keras_vit.layers.std_conv import StdConv2D
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = ["ClassifierHead", "DistilledHead", "GroupNormalization", "ImageSizeCheck", "LayerNormalization", "Patches", "PatchEncoder", "SequencePooling", "StdConv2D", "TransformerBlock", "model_class_names", "set_model_class_names"]
