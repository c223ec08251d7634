"""Cross-entropy and accuracy that take integer labels and Mixup's soft labels alike.

A training pipeline with Mixup or CutMix (`keras_vit.data`,
`mixup_alpha` / `cutmix_alpha`) yields float32 labels `(batch, classes)`,
mixed one-hot rows; its held-out pipeline yields int32 class indices
`(batch,)`. Keras resolves `"accuracy"` and picks a sparse or a categorical
loss once, from the first labels it sees, so one model compiled for the one
form fails (or silently measures the wrong thing) on the other. These two
decide per call from the labels' static shape, which is known when the
train and the test step are traced, under every backend.
"""

import keras
from keras import ops

from keras_vit.common.validation import check_bool, check_rate


def soft_labels(y_true, y_pred):
    """True when `y_true` holds one row of class weights per example, as `y_pred` does (Mixup's labels).

    Args:
        y_true: labels, int `(batch,)` or `(batch, 1)` class indices, or
            float `(batch, classes)`.
        y_pred: `(batch, classes)` scores.

    Returns:
        bool, from the static shapes.
    """
    classes = y_pred.shape[-1]
    return len(y_true.shape) == len(y_pred.shape) and y_true.shape[-1] == classes and classes != 1


@keras.saving.register_keras_serializable(package="keras_vit")
class Crossentropy(keras.losses.Loss):
    """Cross-entropy on integer class indices or on soft (Mixup / CutMix) labels, with label smoothing.

    Integer labels are one-hot encoded; soft labels are used as they are.
    With `label_smoothing` s the targets are `(1 - s) * targets + s /
    classes` (Szegedy et al. 2016, as `keras.losses.categorical_crossentropy`
    computes it). Without smoothing, integer labels take Keras'
    `sparse_categorical_crossentropy`.

    Args:
        label_smoothing: float in [0, 1), default 0.
        from_logits: bool, whether `y_pred` are logits (True) or
            probabilities (False).

    Inputs: `y_true` int `(batch,)` or `(batch, 1)` class indices, or float
    `(batch, classes)` rows of class weights (summing to 1); `y_pred` float
    `(batch, classes)`. Output: the per-example loss, reduced by the usual
    Keras `reduction`.

    Raises:
        ValueError: `label_smoothing` outside [0, 1), or `from_logits` not a
            bool.
    """

    def __init__(self, label_smoothing=0.0, from_logits=False, name="crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)
        check_rate("label_smoothing", label_smoothing)
        check_bool("from_logits", from_logits)
        self.label_smoothing = label_smoothing
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        if soft_labels(y_true, y_pred):
            targets = ops.cast(y_true, y_pred.dtype)
        elif not self.label_smoothing:
            return keras.losses.sparse_categorical_crossentropy(y_true, y_pred, from_logits=self.from_logits)
        else:
            labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
            targets = ops.one_hot(labels, ops.shape(y_pred)[-1], dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(
            targets, y_pred, from_logits=self.from_logits, label_smoothing=self.label_smoothing
        )

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "from_logits": self.from_logits})
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class SparseCategoricalCrossentropyWithSmoothing(Crossentropy):
    """`Crossentropy` under the name keras_vit's `compile_model` saved before it took soft labels.

    Kept so that `.keras` files written then load; new models get
    `Crossentropy`. Same arguments.
    """

    def __init__(self, label_smoothing=0.0, from_logits=False, name="sparse_categorical_crossentropy_with_smoothing",
                 **kwargs):
        super().__init__(label_smoothing=label_smoothing, from_logits=from_logits, name=name, **kwargs)


def accuracy(y_true, y_pred):
    """Per-example top-1 accuracy, 1.0 or 0.0, for integer or soft labels.

    A soft label's class is its largest weight (the dominant image of a
    Mixup pair), as `keras.metrics.categorical_accuracy` reads one-hot rows.

    Args:
        y_true: int `(batch,)` or `(batch, 1)` class indices, or float
            `(batch, classes)`.
        y_pred: float `(batch, classes)` scores (logits or probabilities).

    Returns:
        float `(batch,)`.
    """
    if soft_labels(y_true, y_pred):
        return keras.metrics.categorical_accuracy(y_true, y_pred)
    return keras.metrics.sparse_categorical_accuracy(y_true, y_pred)


@keras.saving.register_keras_serializable(package="keras_vit")
class Accuracy(keras.metrics.MeanMetricWrapper):
    """Top-1 accuracy (`accuracy`) for integer and soft labels; `compile_model` puts it where "accuracy" is asked.

    Args:
        name: str, default "accuracy" (so `fit`'s history keeps its
            "accuracy" and "val_accuracy" keys).
        dtype: the metric's dtype, default None (float32).
    """

    def __init__(self, name="accuracy", dtype=None):
        super().__init__(fn=accuracy, name=name, dtype=dtype)

    def get_config(self):
        return {"name": self.name, "dtype": self.dtype}
