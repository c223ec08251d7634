"""The ViT training recipe as one function that compiles a model.

The paper's recipe (arXiv:2010.11929, Sec. 4.1 "Training & Fine-tuning" and
Appendix B.1) and its reference code (google-research/vision_transformer,
`train.py`, `configs/`): SGD with momentum 0.9 for fine-tuning or
Adam(W) for training from scratch, linear warm-up then cosine decay to zero,
gradient clipping at global norm 1, optional label smoothing, compiled with
XLA (`jit_compile=True`), which this module checks really holds.
"""

import keras
from keras import ops

from keras_vit._validation import check_bool, check_choice, check_positive_int, check_rate

OPTIMIZERS = ("sgd", "adamw")
# Variables that AdamW's decoupled weight decay leaves alone (biases, LayerNorm
# scales and offsets, the class token and position embeddings), as in timm and DeiT.
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "class_token", "position_embedding")


@keras.saving.register_keras_serializable(package="keras_vit")
class SparseCategoricalCrossentropyWithSmoothing(keras.losses.Loss):
    """Cross-entropy on integer labels with label smoothing.

    Keras' `SparseCategoricalCrossentropy` has no `label_smoothing`; this one
    one-hot encodes the labels and calls `keras.losses.categorical_crossentropy`
    with it (targets (1 - s) * one_hot + s / classes; Szegedy et al. 2016).

    Args:
        label_smoothing: float in [0, 1).
        from_logits: bool, whether `y_pred` are logits (True) or
            probabilities (False).

    Inputs: `y_true` int `(batch,)` or `(batch, 1)` class indices;
    `y_pred` float `(batch, classes)`. Output: per-example loss, reduced by
    the usual Keras `reduction`.
    """

    def __init__(self, label_smoothing=0.0, from_logits=False, name="sparse_categorical_crossentropy_with_smoothing", **kwargs):
        super().__init__(name=name, **kwargs)
        check_rate("label_smoothing", label_smoothing)
        self.label_smoothing = label_smoothing
        self.from_logits = from_logits

    def call(self, y_true, y_pred):
        labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
        one_hot = ops.one_hot(labels, ops.shape(y_pred)[-1], dtype=y_pred.dtype)
        return keras.losses.categorical_crossentropy(
            one_hot, y_pred, from_logits=self.from_logits, label_smoothing=self.label_smoothing
        )

    def get_config(self):
        config = super().get_config()
        config.update({"label_smoothing": self.label_smoothing, "from_logits": self.from_logits})
        return config


def learning_rate_schedule(learning_rate, total_steps, warmup_steps=0):
    """Linear warm-up from 0 to `learning_rate`, then cosine decay to 0.

    The schedule of the reference code (`utils.create_learning_rate_schedule`
    with "cosine"), built on `keras.optimizers.schedules.CosineDecay`.

    Args:
        learning_rate: float > 0, the peak learning rate.
        total_steps: int >= 1, optimizer steps of the whole run.
        warmup_steps: int in [0, total_steps), default 0.

    Returns:
        A `keras.optimizers.schedules.CosineDecay`.

    Raises:
        ValueError: non-positive `learning_rate` or `total_steps`, or
            `warmup_steps` outside [0, total_steps).
    """
    if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or learning_rate <= 0:
        raise ValueError(f"`learning_rate` must be a positive float. Received: learning_rate={learning_rate!r}")
    check_positive_int("total_steps", total_steps)
    if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or not 0 <= warmup_steps < total_steps:
        raise ValueError(
            f"`warmup_steps` must be an int in [0, total_steps={total_steps}). Received: warmup_steps={warmup_steps!r}"
        )
    if warmup_steps == 0:
        return keras.optimizers.schedules.CosineDecay(float(learning_rate), decay_steps=total_steps)
    return keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=total_steps - warmup_steps,
        warmup_target=float(learning_rate),
        warmup_steps=warmup_steps,
    )


def compile_model(
    model,
    *,
    total_steps,
    optimizer="adamw",
    learning_rate=1e-3,
    warmup_steps=0,
    weight_decay=0.05,
    momentum=0.9,
    global_clipnorm=1.0,
    label_smoothing=0.0,
    ema_momentum=None,
    from_logits=None,
    jit_compile=True,
    metrics=("accuracy",),
):
    """Compiles `model` with the ViT training recipe and checks XLA holds.

    Optimizer "sgd": SGD with momentum (the paper's fine-tuning, Appendix
    B.1.1). "adamw": AdamW, beta_1 0.9, beta_2 0.999, with decoupled weight
    decay not applied to biases, LayerNorm parameters, class token and
    position embeddings (the paper pre-trains with Adam and weight decay
    0.1; AdamW is what timm and DeiT use for training from scratch). Both
    use `learning_rate_schedule` and clip gradients at global norm
    `global_clipnorm` (1 in the paper). Under the `mixed_float16` policy
    Keras wraps the optimizer in a `LossScaleOptimizer`.

    Args:
        model: a `keras.Model` whose output is `(batch, classes)`.
        total_steps: int >= 1, optimizer steps of the whole run
            (epochs x steps per epoch).
        optimizer: "adamw" (default) or "sgd".
        learning_rate: float > 0, peak learning rate, default 1e-3.
        warmup_steps: int in [0, total_steps), linear warm-up steps.
        weight_decay: float >= 0, AdamW's decoupled weight decay, default
            0.05. Must be 0 with "sgd" (the paper uses none for fine-tuning).
        momentum: float in [0, 1), SGD momentum, default 0.9.
        global_clipnorm: float > 0 or None, default 1.0.
        label_smoothing: float in [0, 1), default 0.
        ema_momentum: None (default) or a float in [0, 1): keep an
            exponential moving average of the weights (Keras' optimizer
            `use_ema`) and write it into the model when `fit` ends; it
            evens out the last steps' noise (Polyak averaging).
        from_logits: None (decide from the head: a softmax activation means
            probabilities, None/linear means logits), or a bool.
        jit_compile: bool, default True: compile train and test steps with
            XLA. Keras can silently fall back to no XLA (e.g. for a layer
            that does not support it); that fall-back is an error here.
            Under mixed_bfloat16 on a machine without GPU or TPU, False is
            faster (XLA:CPU does not use the CPU's bfloat16 units);
            `keras_vit.distribute.choose_xla("auto", strategy, precision)`
            decides as `keras-vit-train --xla auto` does.
        metrics: Keras metrics, default ("accuracy",).

    Returns:
        The same `model`, compiled.

    Raises:
        ValueError: any argument outside the ranges above, or `from_logits`
            None with a head that is neither softmax nor linear.
        RuntimeError: `jit_compile=True` was asked for and Keras fell back
            to running without XLA.
    """
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_rate("label_smoothing", label_smoothing)
    check_rate("momentum", momentum)
    check_bool("jit_compile", jit_compile)
    if isinstance(weight_decay, bool) or not isinstance(weight_decay, (int, float)) or weight_decay < 0:
        raise ValueError(f"`weight_decay` must be a float >= 0. Received: weight_decay={weight_decay!r}")
    if optimizer == "sgd" and weight_decay:
        raise ValueError(
            "`weight_decay` is only used with optimizer='adamw'; use weight_decay=0 with 'sgd'. "
            f"Received: weight_decay={weight_decay!r}"
        )
    if global_clipnorm is not None and (
        isinstance(global_clipnorm, bool) or not isinstance(global_clipnorm, (int, float)) or global_clipnorm <= 0
    ):
        raise ValueError(
            f"`global_clipnorm` must be None or a positive float. Received: global_clipnorm={global_clipnorm!r}"
        )
    if ema_momentum is not None:
        check_rate("ema_momentum", ema_momentum)
    ema = {"use_ema": ema_momentum is not None, "ema_momentum": ema_momentum or 0.99}
    if from_logits is None:
        from_logits = _head_gives_logits(model)
    check_bool("from_logits", from_logits)

    schedule = learning_rate_schedule(learning_rate, total_steps, warmup_steps)
    if optimizer == "sgd":
        opt = SGD(schedule, momentum=momentum, global_clipnorm=global_clipnorm, **ema)
    else:
        opt = AdamW(
            schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=0.999, global_clipnorm=global_clipnorm, **ema
        )
        opt.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    if label_smoothing:
        loss = SparseCategoricalCrossentropyWithSmoothing(label_smoothing, from_logits=from_logits)
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=from_logits)

    model.compile(optimizer=opt, loss=loss, metrics=list(metrics), jit_compile=jit_compile)
    if jit_compile and not model.jit_compile:
        raise RuntimeError(
            f"XLA was requested (jit_compile=True) but Keras fell back to running {model.name!r} "
            "without it: a layer of the model does not support XLA. Pass jit_compile=False to train without XLA."
        )
    return model


def _replicas():
    import tensorflow as tf

    return tf.distribute.get_strategy().num_replicas_in_sync


class _ClipAfterAllReduce:
    """Clips by global norm the gradient summed over replicas, not each replica's part of it.

    Keras 3.15's TensorFlow optimizer clips each replica's gradient (with
    `global_clipnorm`) before the cross-replica sum, so with N replicas the
    update may reach N times the norm the recipe allows, and a multi-device
    run drifts from a one-device run (docs/traps.md). Here the clipping moves
    after the all-reduce; on one device nothing changes.
    """

    def _clip_gradients(self, grads):
        if self.global_clipnorm and _replicas() > 1:
            return grads  # clipped in _all_reduce_sum_gradients, after the sum
        return super()._clip_gradients(grads)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        reduced = super()._all_reduce_sum_gradients(grads_and_vars)
        if not (self.global_clipnorm and _replicas() > 1):
            return reduced
        from keras.src.optimizers.base_optimizer import clip_by_global_norm  # what Keras' own clipping uses

        kept = [(g, v) for g, v in reduced if g is not None]
        clipped = clip_by_global_norm([g for g, _ in kept], self.global_clipnorm)
        clipped = iter(clipped)
        return [(next(clipped), v) if g is not None else (g, v) for g, v in reduced]


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_ClipAfterAllReduce, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose `global_clipnorm` applies to the cross-replica gradient (tf.distribute)."""


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_ClipAfterAllReduce, keras.optimizers.SGD):
    """`keras.optimizers.SGD` whose `global_clipnorm` applies to the cross-replica gradient (tf.distribute)."""


def _head_gives_logits(model):
    activation = getattr(model.layers[-1], "activation", None)
    if activation is keras.activations.softmax:
        return False
    if activation is None or activation is keras.activations.linear:
        return True
    raise ValueError(
        f"Cannot tell whether the head of {model.name!r} gives logits or probabilities "
        f"(activation {getattr(activation, '__name__', activation)!r}); pass from_logits=True or False."
    )
