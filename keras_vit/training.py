"""The ViT training recipe as one function that compiles a model.

The paper's recipe (arXiv:2010.11929, Sec. 4.1 "Training & Fine-tuning" and
Appendix B.1) and its reference code (google-research/vision_transformer,
`train.py`, `configs/`): SGD with momentum 0.9 for fine-tuning or
Adam(W) for training from scratch, linear warm-up then cosine decay to zero,
gradient clipping at global norm 1, optional label smoothing, compiled with
XLA (`jit_compile=True`), which this module checks really holds. The loss
and the accuracy (`keras_vit.losses`) take integer class indices and the
soft labels of Mixup and CutMix alike.
"""

import logging

import keras

from keras_vit import even_batches
from keras_vit.common.backend import backend
from keras_vit.losses import Accuracy, Crossentropy
from keras_vit.common.validation import check_bool, check_choice, check_positive_int, check_rate

OPTIMIZERS = ("sgd", "adamw")
# Variables that AdamW's decoupled weight decay leaves alone (biases, LayerNorm
# scales and offsets, the class and distillation tokens and position embeddings), as in timm and DeiT.
NO_WEIGHT_DECAY = ("bias", "gamma", "beta", "class_token", "distillation_token", "position_embedding")


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
    jit_compile="auto",
    metrics=("accuracy",),
):
    """Compiles `model` with the ViT training recipe and checks XLA holds.

    Optimizer "sgd": SGD with momentum (the paper's fine-tuning, Appendix
    B.1.1). "adamw": AdamW, beta_1 0.9, beta_2 0.999, with decoupled weight
    decay not applied to biases, LayerNorm parameters, class token (and
    DeiT's distillation token) and position embeddings (the paper pre-trains with Adam and weight decay
    0.1; AdamW is what timm and DeiT use for training from scratch). Both
    use `learning_rate_schedule` and clip gradients at global norm
    `global_clipnorm` (1 in the paper). A model that computes in float16
    (the `mixed_float16` policy) gets the optimizer wrapped in a
    `keras.optimizers.LossScaleOptimizer` (dynamic loss scaling). The
    optimizer, its schedule, its weight-decay exclusions, the loss-scaling
    wrapper and the optimizer state (step counter, moments, loss scale) are
    saved with `model.save` and come back with `keras.saving.load_model`,
    under any global dtype policy, so a run continues where it stopped.

    Precision: the weights must be float32. Build the model under the
    `mixed_bfloat16` or `mixed_float16` Keras policy for 16-bit compute
    (float32 weights, 16-bit matrix products: the speed of 16-bit, the
    updates of float32). A model built under the pure `bfloat16` or
    `float16` policy is refused: with 16-bit weights Keras' Adam(W) makes no
    step at all in bfloat16 (beta_2 = 0.999 rounds to 1.0, so its
    bias-corrected step size 1 - beta_2^t is 0), pure float16 has no loss
    scaling, and in both most updates of a small learning rate round away
    (measured on a 2-layer ViT, 40 steps: 0.3% of the weights changed under
    bfloat16 with AdamW, 17% under float16 with AdamW and under bfloat16 with
    SGD; all of them under float32 and the mixed policies).

    Backends: TensorFlow, JAX and PyTorch (Keras 3). `jit_compile="auto"`
    (default) is True on TensorFlow and JAX (XLA) and False on PyTorch,
    where Keras' `jit_compile=True` means `torch.compile`, which Keras marks
    experimental (measured here: it recompiles Keras' layers past dynamo's
    limit and falls back to eager with warnings).

    Data parallelism on JAX (`keras.distribution.DataParallel` set before
    the model is built): a batch must split evenly over the devices, so
    under such a distribution the compiled model's `fit` drops the images
    of a batch beyond a multiple of the device count, and `predict` and
    `evaluate` pad and trim, every image counted once
    (`keras_vit.even_batches`, for `tf.data` datasets and NumPy arrays).

    Op determinism: Keras 3.15 never compiles with XLA while TensorFlow's op
    determinism is on (`tf.config.experimental.enable_op_determinism()` or
    the environment variable `TF_DETERMINISTIC_OPS=1`). `jit_compile="auto"`
    then trains deterministically without XLA and says why in one WARNING
    log line (logger "keras_vit.training"), as `keras-vit-train --xla auto`
    does; `jit_compile=True` is refused.

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
        label_smoothing: float in [0, 1), default 0: targets (1 - s) x
            labels + s / classes (Szegedy et al. 2016; DeiT uses 0.1).
            The loss is `keras_vit.losses.Crossentropy`, which takes int
            labels `(batch,)` and Mixup / CutMix's float `(batch, classes)`.
        ema_momentum: None (default) or a float in [0, 1): keep an
            exponential moving average of the weights (Keras' optimizer
            `use_ema`) and write it into the model when `fit` ends; it
            evens out the last steps' noise (Polyak averaging).
        from_logits: None (decide from the head: a softmax activation means
            probabilities, None/linear means logits), or a bool.
        jit_compile: "auto" (default: True on TensorFlow and JAX, False on
            PyTorch and under op determinism, see above) or a bool: True compiles train and test
            steps with XLA (`torch.compile` on PyTorch). Keras can silently fall back to no XLA (e.g. for a layer
            that does not support it, or under op determinism); that
            fall-back is an error here.
            Under mixed_bfloat16 on a machine without GPU or TPU, False is
            faster (XLA:CPU does not use the CPU's bfloat16 units);
            `keras_vit.distribute.choose_xla("auto", strategy, precision)`
            decides as `keras-vit-train --xla auto` does.
        metrics: Keras metrics, default ("accuracy",). "accuracy" (or
            "acc") becomes `keras_vit.losses.Accuracy` (still named
            "accuracy") on a head of more than one output, so that it reads
            integer and soft labels alike.

    Returns:
        The same `model`, compiled.

    Raises:
        ValueError: any argument outside the ranges above, `from_logits`
            None with a head that is neither softmax nor linear, a model
            with float16 or bfloat16 weights (the message names the policy
            to use instead), a model quantised with `model.quantize`, or a
            mixed_float16 model on JAX's CPU backend (no float16 matrix
            product there).
        RuntimeError: `jit_compile=True` was asked for while op determinism
            is on (the message says so and what to do), or Keras fell back
            to running without XLA.
    """
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_rate("label_smoothing", label_smoothing)
    check_rate("momentum", momentum)
    auto = isinstance(jit_compile, str)
    jit_compile = resolve_jit_compile(jit_compile)
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
        from_logits = head_gives_logits(model)
    check_bool("from_logits", from_logits)
    _check_float32_weights(model)
    _check_trainable_here(model)
    if jit_compile and auto and op_determinism_enabled():
        jit_compile = False
        logging.getLogger("keras_vit.training").warning(
            "compile_model(jit_compile='auto'): TensorFlow's op determinism is on, and Keras never compiles with XLA "
            "then: %r trains deterministically without XLA (turn op determinism off to train with XLA)", model.name)
    if jit_compile and op_determinism_enabled():
        raise RuntimeError(
            "XLA was requested (jit_compile=True) but TensorFlow's op determinism is on "
            "(tf.config.experimental.enable_op_determinism() or TF_DETERMINISTIC_OPS=1), and Keras never compiles "
            f"with XLA then: {model.name!r} would train without it. Pass jit_compile=False to train "
            "deterministically without XLA, or leave op determinism off to train with XLA."
        )

    schedule = learning_rate_schedule(learning_rate, total_steps, warmup_steps)
    if optimizer == "sgd":
        opt = SGD(schedule, momentum=momentum, global_clipnorm=global_clipnorm, **ema)
    else:
        opt = AdamW(
            schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=0.999, global_clipnorm=global_clipnorm, **ema
        )
        opt.exclude_from_weight_decay(var_names=list(NO_WEIGHT_DECAY))
    loss = Crossentropy(label_smoothing, from_logits=from_logits)  # integer labels, and Mixup's soft ones
    if _output_columns(model) != 1:  # Keras would fix "accuracy" to one label form at the first batch
        metrics = [Accuracy() if m in ("accuracy", "acc") else m for m in metrics]

    if _computes_in_float16(model):
        # Wrapped here, not by Keras' compile: then the wrapper is part of the saved compile config, and
        # load_model keeps it (and the optimizer state) under any global policy (docs/traps.md).
        opt = keras.optimizers.LossScaleOptimizer(opt, name="loss_scale_optimizer")
    model.compile(optimizer=opt, loss=loss, metrics=list(metrics), jit_compile=jit_compile)
    if jit_compile and not model.jit_compile:
        raise RuntimeError(
            f"XLA was requested (jit_compile=True) but Keras fell back to running {model.name!r} "
            "without it: a layer of the model does not support XLA. Pass jit_compile=False to train without XLA."
        )
    even_batches.install(model)  # under keras.distribution's data parallelism on JAX: any data-set size
    return model


def resolve_jit_compile(jit_compile):
    """`jit_compile` as a bool: "auto" is True on TensorFlow and JAX (XLA), False on PyTorch (see `compile_model`).

    Raises:
        ValueError: `jit_compile` is not "auto", True or False.
    """
    if not (isinstance(jit_compile, bool) or (isinstance(jit_compile, str) and jit_compile == "auto")):
        raise ValueError(f"`jit_compile` must be 'auto', True or False. Received: jit_compile={jit_compile!r}")
    return backend() != "torch" if jit_compile == "auto" else jit_compile


def op_determinism_enabled():
    """True when TensorFlow's op determinism is on in this process.

    It is turned on by `tf.config.experimental.enable_op_determinism()` or by
    the environment variable `TF_DETERMINISTIC_OPS=1` (read when TensorFlow
    starts). Keras 3.15 then refuses XLA (`keras.src.trainers.trainer.
    model_supports_jit` asks the same TensorFlow function,
    `tensorflow.python.framework.config.is_op_determinism_enabled`).

    Returns:
        bool.
    """
    if backend() != "tensorflow":
        return False  # as Keras: determinism only stops XLA on the TensorFlow backend (and TensorFlow may be absent)
    from tensorflow.python.framework.config import is_op_determinism_enabled

    return bool(is_op_determinism_enabled())


def _check_float32_weights(model):
    """Raises ValueError when `model` has float16 or bfloat16 trainable weights (see `compile_model`)."""
    low = next((v for v in model.trainable_variables if v.dtype in ("float16", "bfloat16")), None)
    if low is None:
        return
    policy = getattr(getattr(model, "dtype_policy", None), "name", None) or low.dtype
    raise ValueError(
        f"`model` has {low.dtype} weights ({low.path}, dtype policy {policy!r}); compile_model trains float32 "
        f"weights only: 16-bit weights lose most optimizer updates to rounding, and Keras' AdamW makes no step at "
        f"all on bfloat16 ones. Build the model under the 'mixed_{low.dtype}' policy instead "
        f"(keras.mixed_precision.set_global_policy('mixed_{low.dtype}') before building it): {low.dtype} compute, "
        f"float32 weights. Received: model={model.name!r} with dtype policy {policy!r}"
    )


def jax_cpu_lacks_float16():
    """True on the JAX backend without GPU or TPU: XLA:CPU has no float16 matrix product ("The precision
    'F16_F16_F32' is not supported by dot_general on CPU"), so `mixed_float16` cannot train or predict there."""
    if backend() != "jax":
        return False
    import jax

    return jax.default_backend() == "cpu"


def _check_trainable_here(model):
    """Raises ValueError for a `model.quantize`d model, or a float16 one on JAX's CPU backend (see compile_model)."""
    from keras_vit.layers.quantized_sublayers import quantization_summary

    quantized = quantization_summary(model)
    if quantized:
        raise ValueError(f"`model`: {quantized}; compile_model trains float models. Train the float model, then quantise "
                         "it for inference.")
    if _computes_in_float16(model) and jax_cpu_lacks_float16():
        raise ValueError(
            f"`model` {model.name!r} computes in float16 (mixed_float16), which JAX's CPU backend cannot: XLA:CPU "
            "has no float16 matrix product. Build it under 'mixed_bfloat16' (or 'float32') on a CPU, or train on a "
            "GPU, or use the TensorFlow or PyTorch backend."
        )


def _computes_in_float16(model):
    """True when `model` or one of its layers computes in float16 (the `mixed_float16` policy)."""
    return any(getattr(layer, "compute_dtype", None) == "float16" for layer in [model, *model.layers])


def _replicas():
    """Replicas of the `tf.distribute` strategy in scope; 1 on other backends (JAX's `keras.distribution`
    shards one global batch, whose gradient, and so its clipping, is already global)."""
    if backend() != "tensorflow":
        return 1
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


class _SavedWeightDecayExclusions:
    """Keeps `exclude_from_weight_decay(...)` in the optimizer's config, so that it survives `model.save`.

    Keras 3.15 keeps the exclusions only on the Python object: `get_config`
    leaves them out, and a model reloaded from a `.keras` file decays the
    biases, LayerNorm parameters and embeddings it was told to skip
    (docs/traps.md). Here the names (`var_names`, patterns searched in each
    variable's `name`, as in Keras) and the variables (`var_list`, saved as
    their `path`, e.g. "transformer_block_0/norm_1/gamma") are constructor
    arguments and config entries.
    """

    def __init__(self, *args, exclude_from_weight_decay_names=None, exclude_from_weight_decay_paths=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._excluded_names, self._excluded_paths = [], []
        if exclude_from_weight_decay_names or exclude_from_weight_decay_paths:
            self.exclude_from_weight_decay(var_names=exclude_from_weight_decay_names)
            self._excluded_paths = list(exclude_from_weight_decay_paths or [])

    def exclude_from_weight_decay(self, var_list=None, var_names=None):
        super().exclude_from_weight_decay(var_list=var_list, var_names=var_names)
        self._excluded_names = list(dict.fromkeys(var_names or []))
        self._excluded_paths = [v.path for v in var_list or []]

    def build(self, variables):
        # Keras matches `var_list` by object identity (`_var_key`); a reloaded optimizer has paths instead.
        if self._excluded_paths:
            keys = {self._var_key(v) for v in variables if v.path in self._excluded_paths}
            self._exclude_from_weight_decay = set(getattr(self, "_exclude_from_weight_decay", ())) | keys
        super().build(variables)

    def get_config(self):
        config = super().get_config()
        config["exclude_from_weight_decay_names"] = list(self._excluded_names)
        config["exclude_from_weight_decay_paths"] = list(self._excluded_paths)
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class AdamW(_SavedWeightDecayExclusions, _ClipAfterAllReduce, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` that clips after the all-reduce and saves its weight-decay exclusions.

    `global_clipnorm` applies to the gradient summed over replicas
    (tf.distribute), not to each replica's part of it; what
    `exclude_from_weight_decay` was given is part of `get_config`, so a model
    saved and loaded with `model.save` / `keras.saving.load_model` keeps it.

    Args:
        *args, **kwargs: those of `keras.optimizers.AdamW`.
        exclude_from_weight_decay_names: optional list of str, the
            `var_names` of `exclude_from_weight_decay`: a variable whose
            `name` contains a match of one of these regular expressions
            gets no weight decay.
        exclude_from_weight_decay_paths: optional list of str, the paths
            (`variable.path`) of variables given to `exclude_from_weight_decay`
            as `var_list`.
    """


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_SavedWeightDecayExclusions, _ClipAfterAllReduce, keras.optimizers.SGD):
    """`keras.optimizers.SGD` that clips after the all-reduce and saves its weight-decay exclusions.

    The same additions as `keras_vit.training.AdamW` (Keras' SGD takes a
    `weight_decay` too), to `keras.optimizers.SGD`'s arguments.
    """


def _output_columns(model):
    """The last dimension of the model's (first) output; None when the model has no symbolic outputs yet."""
    try:
        outputs = model.outputs
    except (AttributeError, ValueError):  # a subclassed or not yet built model
        return None
    return outputs[0].shape[-1] if outputs else None


def _last_operation(model):
    """The layer or operation that makes `model`'s (first) output: its output tensor's, else its last layer."""
    try:
        return model.outputs[0]._keras_history.operation
    except (AttributeError, ValueError, IndexError, TypeError):  # a Sequential without outputs yet, a subclass
        return model.layers[-1] if model.layers else None


def head_gives_logits(model, argument="from_logits", remedy=None):
    """Whether `model`'s output is logits (True) or probabilities (False), read from its last layer's activation.

    The last layer is the one that makes the output (in a functional model, the operation of its output
    tensor); a nested model there is read the same way, down to its own last layer. Softmax (as an activation,
    a `keras.layers.Softmax` layer or `keras.ops.softmax`) means probabilities; None or linear (or a model
    without layers) means logits. Used by
    `compile_model(from_logits=None)` and `keras_vit.distillation.Distiller(teacher_from_logits=None)`.

    `remedy`, when given, replaces the message's "; pass ARGUMENT=True or False." (a command line without that
    argument says what to do instead).

    Raises:
        ValueError: any other activation (sigmoid, relu, ...); the message names `argument`, the argument
            that settles it.
    """
    last = _last_operation(model)
    if isinstance(last, keras.Model):
        return head_gives_logits(last, argument, remedy)
    activation = getattr(last, "activation", None)
    if activation is keras.activations.softmax or type(last).__name__ == "Softmax":  # the layer or the op
        return False
    if activation is None or activation is keras.activations.linear:
        return True
    raise ValueError(
        f"Cannot tell whether {model.name!r} gives logits or probabilities (last activation "
        f"{getattr(activation, '__name__', activation)!r})"
        + (remedy if remedy is not None else f"; pass {argument}=True or False.")
    )
