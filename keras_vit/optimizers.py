"""The optimizers of `keras_vit.training.compile_model`: Keras' AdamW and SGD with three fixes.

- `global_clipnorm` clips the gradient summed over `tf.distribute` replicas,
  not each replica's part of it (Keras 3.15 clips before the all-reduce).
- What `exclude_from_weight_decay` was given is saved in `get_config`, so it
  survives `model.save` (Keras 3.15 drops it).
- `jit_compile=True` applies each update as one XLA-compiled function on
  TensorFlow, for train steps that run without XLA.

docs/traps.md lists the Keras behaviours behind the first two; the third's
speed is in benchmarks/README.md. Also importable as `keras_vit.training.AdamW`
and `keras_vit.training.SGD`.
"""

import keras

from keras_vit.common.backend import backend, op_determinism_enabled
from keras_vit.common.validation import check_bool


def xla_update_possible():
    """True where `jit_compile=True` applies an update under XLA: the TensorFlow backend, outside a
    `tf.distribute` strategy (its update merges replicas, which XLA cannot compile) and with TensorFlow's op
    determinism off (Keras turns XLA off under it)."""
    if backend() != "tensorflow" or op_determinism_enabled():
        return False
    import tensorflow as tf

    return not tf.distribute.has_strategy()


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


class _XlaUpdate:
    """With `jit_compile=True`, applies each update as one XLA-compiled function on the TensorFlow backend.

    Without XLA in the train step, TensorFlow runs the update variable by
    variable: about 30 small ops (clipping's norm, weight decay, both moments,
    bias correction, the assignments) for each of ViT-Ti/16's 200 variables,
    some 6,000 in the graph a step. Compiled, they fuse into a few loops. tf.keras
    2.11-2.15's optimizers did the same on GPUs (their `jit_compile=True`
    default). Measured on a CPU without XLA in the step (mixed_bfloat16, where
    that is the fastest setting): 1.065x (Ti/16) and 1.04x (S/16) a training
    step, in turn (benchmarks/README.md). The values are the same up to float32
    rounding (XLA may reorder a sum).

    The plain update runs instead on JAX and PyTorch (JAX compiles the whole
    step anyway), under a `tf.distribute` strategy (the update then merges
    replicas, which XLA cannot compile), under TensorFlow's op determinism
    (under which Keras turns XLA off) and before the optimizer is built.
    """

    def __init__(self, *args, jit_compile=False, **kwargs):
        super().__init__(*args, **kwargs)
        check_bool("jit_compile", jit_compile)
        self.jit_compile = jit_compile
        self._xla_updates = {}

    def apply(self, grads, trainable_variables=None):
        if not (self.jit_compile and self.built and xla_update_possible()):
            return super().apply(grads, trainable_variables)
        import tensorflow as tf  # the TensorFlow backend is in use, so TensorFlow is installed

        variables = self._trainable_variables if trainable_variables is None else list(trainable_variables)
        key = tuple(id(v) for v in variables)
        if key not in self._xla_updates:
            apply = super().apply
            self._xla_updates[key] = tf.function(lambda g: apply(g, variables), jit_compile=True, autograph=False)
        self._xla_updates[key](list(grads))

    def get_config(self):
        return {**super().get_config(), "jit_compile": self.jit_compile}


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
class AdamW(_XlaUpdate, _SavedWeightDecayExclusions, _ClipAfterAllReduce, keras.optimizers.AdamW):
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
        jit_compile: bool, default False. True: on TensorFlow each update
            runs as one XLA-compiled function, except under a `tf.distribute`
            strategy or op determinism (`compile_model`'s
            `jit_compile_update`); no effect on JAX and PyTorch.

    Raises:
        ValueError: `jit_compile` is not a bool, or one of Keras' checks of
            its own arguments.
    """


@keras.saving.register_keras_serializable(package="keras_vit")
class SGD(_XlaUpdate, _SavedWeightDecayExclusions, _ClipAfterAllReduce, keras.optimizers.SGD):
    """`keras.optimizers.SGD` that clips after the all-reduce and saves its weight-decay exclusions.

    The same additions as `keras_vit.training.AdamW` (Keras' SGD takes a
    `weight_decay` too; `jit_compile` applies the update under XLA), to
    `keras.optimizers.SGD`'s arguments.
    """
