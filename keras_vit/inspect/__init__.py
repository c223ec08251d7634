"""Looking inside a ViT: the paper's inspection tools (Sec. 4.5, Figures 6, 7 and 14) and the figures of
masked patch prediction (Sec. 4.6).

    attention_weights(model, images)          per layer (batch, heads, seq, seq)
    attention_rollout(model, images)          one map per image at the input resolution (Fig. 6, 14)
    mean_attention_distance(model, images)    (layers, heads) in pixels (Fig. 7 right)
    position_embedding_similarity(model)      (rows, cols, rows, cols) cosines (Fig. 7 centre)
    embedding_filters(model, n)               top principal components of the patch filters (Fig. 7 left)
    masked_patch_prediction(model, images)    corrupted inputs, predicted and true mean colours (Sec. 4.6)
    plot_*(..., path)                         PNG figures of each (matplotlib)

The pure-array functions `rollout` and `attention_distance` hold the
mathematics and take plain NumPy arrays. `internals.py` holds Sec. 4.5's
tools, `masked.py` Sec. 4.6's figures.
"""

from keras_vit.inspect.internals import (
    attention_distance,
    attention_rollout,
    attention_weights,
    embedding_filters,
    mean_attention_distance,
    plot_attention_rollout,
    plot_embedding_filters,
    plot_mean_attention_distance,
    plot_position_embedding_similarity,
    position_embedding_similarity,
    rollout,
)
from keras_vit.inspect.masked import (
    corrupted_images,
    masked_patch_prediction,
    mean_color_image,
    plot_masked_patch_prediction,
)

__all__ = [
    "attention_weights",
    "rollout",
    "attention_rollout",
    "attention_distance",
    "mean_attention_distance",
    "position_embedding_similarity",
    "embedding_filters",
    "plot_attention_rollout",
    "plot_mean_attention_distance",
    "plot_position_embedding_similarity",
    "plot_embedding_filters",
    "mean_color_image",
    "corrupted_images",
    "masked_patch_prediction",
    "plot_masked_patch_prediction",
]
