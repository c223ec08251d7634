"""Self-supervised pre-training by masked patch prediction (ViT paper, Sec. 4.6 and Appendix B.1.2).

The model and its compile step are in `model.py`; `masked_patches.py` holds the data side: targets,
corruption and the data set.
"""

from keras_vit.pretraining.masked_patches import (  # noqa: F401
    COLOR_LEVELS,
    DOWNSIZED_SIDE,
    KEPT,
    LEVEL_EPSILON,
    MASK_SHARE,
    MASKED,
    REPLACE_SHARE,
    REPLACED,
    TARGETS,
    UNTOUCHED,
    corruption,
    masked_patch_dataset,
    patch_targets,
    target_size,
)
from keras_vit.pretraining.model import MaskedPatchPrediction, backbone_cell_size, compile_pretraining  # noqa: F401
