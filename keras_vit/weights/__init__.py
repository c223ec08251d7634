"""Pretrained ViT weights: Google's `.npz` checkpoints, Hugging Face and timm files.

Kept out of the layer and model modules: `keras_vit.VisionTransformer(
weights=...)` calls in here only when given a checkpoint.

    load_pretrained(model, checkpoint, head="auto", ...)  all-or-nothing load
    resample_position_embedding(...)                      paper Sec. 3.2
    convert(source, output, ...)                          checkpoint -> .weights.h5 / .keras
    save_checkpoint(model, path)                          model -> Google-layout .npz
    CHECKPOINTS, fetch                                    published files, checked download
"""

from keras_vit.weights.convert import convert
from keras_vit.weights.layouts import CheckpointError, detect_layout, read_checkpoint, to_canonical
from keras_vit.weights.checkpoint import infer_config, save_checkpoint
from keras_vit.weights.loader import LoadReport, load_pretrained, variant_of
from keras_vit.weights.registry import CHECKPOINTS, DEFAULTS, Checkpoint, fetch, resolve, sha256
from keras_vit.weights.resample import resample_position_embedding
from keras_vit.weights import builder_weights  # noqa: F401 (registers VisionTransformer(weights=...)'s loader)

__all__ = [
    "CHECKPOINTS",
    "DEFAULTS",
    "Checkpoint",
    "CheckpointError",
    "LoadReport",
    "convert",
    "detect_layout",
    "fetch",
    "infer_config",
    "load_pretrained",
    "read_checkpoint",
    "resample_position_embedding",
    "resolve",
    "save_checkpoint",
    "sha256",
    "to_canonical",
    "variant_of",
]
