"""Distillation through attention (DeiT): a distilled ViT trained against a frozen teacher.

DeiT (Touvron et al., "Training data-efficient image transformers &
distillation through attention", ICML 2021, arXiv:2012.12877, Sec. 4) adds a
distillation token to the ViT (`keras_vit.VisionTransformer(...,
distillation_token=True)`). Its head (`keras_vit.layers.DistilledHead`) has a
class head, trained on the labels, and a distillation head, trained on a
teacher's output; at inference the two are averaged. With a CNN teacher the
student inherits some of the CNN's inductive bias, which is what a ViT lacks
on small data (ViT paper, Sec. 4.2). The losses, with Z_c and Z_d the class
and distillation heads' logits, Z_t the teacher's, psi the softmax:

    hard (DeiT's default, Eq. 3):  (1 - a) CE(psi(Z_c), y) + a CE(psi(Z_d), argmax Z_t)
    soft (Eq. 2, Hinton et al.):   (1 - a) CE(psi(Z_c), y) + a T^2 KL(psi(Z_t / T) || psi(Z_d / T))

with a = `alpha` (1/2 in DeiT) and T = `temperature`; CE(., y) is the
compiled loss (`keras_vit.training.compile_model`'s, so label smoothing and
Mixup / CutMix's soft labels apply to it). The KL term is the mean over the
batch of each image's KL divergence (the paper's Eq. 2); DeiT's code divides
its sum by the number of logits instead, a factor of 1 / classes smaller.
"""

import logging
import numbers

import keras
from keras import ops
from keras.backend import backend

from keras_vit.common.validation import check_choice
from keras_vit.layers.distilled_head import DistilledHead
from keras_vit.training import head_gives_logits

DISTILLATIONS = ("hard", "soft")
# Soft distillation's largest temperature: the loss is scaled by T^2, which overflows float32 (NaN loss) from
# about 1.8e19, and far below that the teacher's softened scores are uniform (Hinton et al. use 1-20)
MAX_TEMPERATURE = 100.0
LOG = logging.getLogger("keras_vit.distillation")


def teacher_logits(teacher_outputs, from_logits):
    """The teacher's logits: its outputs, or the log of its probabilities (equal to the logits up to a constant per
    image, which no softmax sees), float32 `(batch, classes)`."""
    outputs = ops.cast(teacher_outputs, "float32")
    return outputs if from_logits else ops.log(ops.maximum(outputs, 1e-12))


def distillation_term(dist_logits, teacher, distillation="hard", temperature=1.0):
    """The distillation head's loss against the teacher, per image (DeiT Eq. 2 and 3; module doc).

    Args:
        dist_logits: float `(batch, classes)`, the distillation head's logits.
        teacher: float `(batch, classes)`, the teacher's logits (`teacher_logits`).
        distillation: "hard" (cross-entropy with the teacher's decision) or
            "soft" (T^2 x KL divergence at temperature T).
        temperature: float > 0, T of "soft".

    Returns:
        float32 `(batch,)`, in nats.
    """
    dist_logits = ops.cast(dist_logits, "float32")
    if distillation == "hard":
        target = ops.one_hot(ops.argmax(teacher, axis=-1), ops.shape(teacher)[-1])
        return -ops.sum(target * ops.log_softmax(dist_logits, axis=-1), axis=-1)
    log_p = ops.log_softmax(teacher / temperature, axis=-1)
    log_q = ops.log_softmax(dist_logits / temperature, axis=-1)
    return temperature ** 2 * ops.sum(ops.exp(log_p) * (log_p - log_q), axis=-1)


@keras.saving.register_keras_serializable(package="keras_vit")
class _DistillationTerm(keras.losses.Loss):
    """`distillation_term` as a Keras loss: `(teacher logits, distillation logits)` -> the mean over the images
    (weighted by `sample_weight`: its sum divides), scaled for distribution as Keras' own losses are."""

    def __init__(self, distillation, temperature):
        super().__init__(reduction="mean_with_sample_weight", name="distillation_term")
        self.distillation, self.temperature = distillation, temperature

    def call(self, y_true, y_pred):
        return distillation_term(y_pred, y_true, self.distillation, self.temperature)


class Distiller(keras.Model):
    """Trains a distilled keras_vit ViT against a frozen teacher with `fit` (DeiT; module doc).

    `call` returns both heads' logits stacked, `(batch, 2, classes)`
    (class head first), which `compute_loss` needs; `compute_metrics`
    reads their average, the student's inference output, so "accuracy" is
    the student's accuracy. Compile it with
    `keras_vit.training.compile_model(distiller, ..., from_logits=True)`
    (the optimizer, schedule, clipping and XLA of the recipe), fit it, and
    use, save or export `distiller.student`: a plain keras_vit model whose
    one output averages the two heads.

    The teacher runs in inference mode (`training=False`) and is frozen
    (`trainable = False`); when it had trainable weights a WARNING line of
    logger "keras_vit.distillation" says so. Its weights are not trained
    and not part of the student. On TensorFlow with XLA on one device it
    runs before the XLA-compiled student step, without XLA (under which
    MobileNetV3Small's forward pass is about 5x slower on CPUs); the losses
    and updates are those of the step that runs it inside.

    Args:
        student: a keras_vit ViT built with `distillation_token=True` and a
            head (`include_top=True`: its `predictions` layer is a
            `DistilledHead`), any `classifier_activation`.
        teacher: a `keras.Model` (a `keras.applications` CNN, keras_vit's
            hybrid, a model loaded from a `.keras` file) that takes the
            student's images (same height, width, channels and pixel range)
            and outputs `(batch, classes)` probabilities or logits.
        distillation: "hard" (default, DeiT's) or "soft".
        temperature: float in (0, `MAX_TEMPERATURE` = 100], default 1.0 (DeiT's soft default); "soft" only.
        alpha: float in [0, 1], default 0.5: the weight of the
            distillation term (DeiT's 1/2).
        teacher_from_logits: None (read from the teacher's last layer: a
            softmax means probabilities, None / linear means logits) or a bool.
        **kwargs: `keras.Model` arguments (name).

    Input shape: `(batch, height, width, channels)`, the student's images.
    Output shape: `(batch, 2, classes)` float32 logits (class head, distillation head).

    Raises:
        ValueError: a student without a distillation token or head; a teacher
            that is not a Keras model, whose input shape or number of classes
            differs from the student's (both named), or whose output is not
            `(batch, classes)`; a bad `distillation`, `temperature`, `alpha`;
            `teacher_from_logits` None and a last activation that is neither
            softmax nor linear.

    Example:

    >>> import numpy as np
    >>> import keras_vit
    >>> student = keras_vit.VisionTransformer(patch_size=4, hidden_size=16, num_layers=1, num_heads=2,
    ...     mlp_dim=32, input_shape=(8, 8, 3), classes=3, distillation_token=True)
    >>> teacher = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3)])
    >>> Distiller(student, teacher)(np.zeros((2, 8, 8, 3), "float32")).shape
    TensorShape([2, 2, 3])
    """

    def __init__(self, student, teacher, distillation="hard", temperature=1.0, alpha=0.5, teacher_from_logits=None,
                 **kwargs):
        super().__init__(**kwargs)
        check_choice("distillation", distillation, DISTILLATIONS)
        for arg, value, low_open in (("temperature", temperature, True), ("alpha", alpha, False)):
            bad = isinstance(value, bool) or not isinstance(value, numbers.Real)  # NumPy's floats too
            if bad or not (0 < value <= MAX_TEMPERATURE if low_open else 0 <= value <= 1):  # NaN fails both
                expected = f"a float in (0, {MAX_TEMPERATURE:g}]" if low_open else "a float in [0, 1]"
                raise ValueError(f"`{arg}` must be {expected}. Received: {arg}={value!r}")
        head = check_teacher(student, teacher)
        if teacher_from_logits is None:
            teacher_from_logits = head_gives_logits(teacher, "teacher_from_logits")
        if not isinstance(teacher_from_logits, bool):
            raise ValueError(f"`teacher_from_logits` must be None or a bool. Received: {teacher_from_logits!r}")
        if teacher.trainable and teacher.trainable_weights:
            LOG.warning("Distiller: the teacher %r had %d trainable weights; it is frozen (trainable=False) and runs "
                        "in inference mode", teacher.name, len(teacher.trainable_weights))
        teacher.trainable = False
        self.student, self.teacher = student, teacher
        self.distillation, self.temperature, self.alpha = distillation, float(temperature), float(alpha)
        self.teacher_from_logits = teacher_from_logits
        # A Keras loss, so that it is reduced as the compiled loss is: the (weighted) mean over the batch, and
        # divided by the replicas under a tf.distribute strategy (their gradients are summed; a plain mean counted
        # the term once per replica: 2x under MirroredStrategy over two devices)
        self._term = _DistillationTerm(distillation, self.temperature)
        self._head = head
        self._tokens = keras.Model(student.inputs, head.input, name=f"{student.name}_tokens")
        self.built = True  # its parts are built models (fit's BackupAndRestore needs a built model)

    def call(self, inputs, training=None):
        if isinstance(inputs, (tuple, list)):  # (images, teacher logits) from `_step_apart`
            inputs = inputs[0]
        cls_logits, dist_logits = self._head.head_logits(self._tokens(inputs, training=training))
        return ops.stack([ops.cast(cls_logits, "float32"), ops.cast(dist_logits, "float32")], axis=1)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        base = super().compute_loss(x=x, y=y, y_pred=y_pred[:, 0], sample_weight=sample_weight, training=training)
        if isinstance(x, (tuple, list)):  # the teacher ran before the XLA step (`_step_apart`)
            teacher = x[1]
        else:
            teacher = teacher_logits(self.teacher(x, training=False), self.teacher_from_logits)
        if sample_weight is not None:
            sample_weight = ops.cast(ops.reshape(sample_weight, (-1,)), "float32")
        term = self._term(ops.stop_gradient(teacher), y_pred[:, 1], sample_weight=sample_weight)
        return (1.0 - self.alpha) * base + self.alpha * term

    # TensorFlow with XLA: the frozen teacher runs before the XLA-compiled student step, not inside it. On CPUs
    # XLA runs MobileNetV3Small's forward pass about 5x slower than TensorFlow's own kernels
    # (benchmarks/findings/distillation-demo.md); the teacher needs no gradient, so nothing is lost by running
    # it apart. Under a tf.distribute strategy, with JAX and with PyTorch it runs inside the step.
    def make_train_function(self, force=False):
        return self._made_apart(super().make_train_function, force)

    def make_test_function(self, force=False):
        return self._made_apart(super().make_test_function, force)

    def train_step(self, *args):  # (data) on TensorFlow and PyTorch, (state, data) on JAX
        return self._step_apart(super().train_step, *args) if self._teacher_apart() else super().train_step(*args)

    def test_step(self, *args):
        return self._step_apart(super().test_step, *args) if self._teacher_apart() else super().test_step(*args)

    def _teacher_apart(self):
        if backend() != "tensorflow" or self.run_eagerly or not self.jit_compile:
            return False
        import tensorflow as tf

        return not tf.distribute.has_strategy()

    def _made_apart(self, make, force):
        if not self._teacher_apart():
            return make(force)
        self.__dict__["_xla_steps"] = {}  # traced anew after a compile (new optimizer, new metrics)
        jit, self._jit_compile = self._jit_compile, False  # Keras' step function runs the teacher, no XLA ...
        try:
            return make(force)
        finally:
            self._jit_compile = jit

    def _step_apart(self, step, data):
        import tensorflow as tf

        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        teacher = teacher_logits(self.teacher(x, training=False), self.teacher_from_logits)
        steps = self.__dict__.setdefault("_xla_steps", {})
        if step.__name__ not in steps:  # ... and calls the student's step, compiled with XLA
            steps[step.__name__] = tf.function(lambda *data: step(keras.utils.pack_x_y_sample_weight(*data)),
                                               jit_compile=True, reduce_retracing=True)
        return steps[step.__name__]((x, tf.stop_gradient(teacher)), y, sample_weight)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        return super().compute_metrics(x, y, ops.mean(y_pred, axis=1), sample_weight)

    def get_config(self):
        return {**super().get_config(), "student": keras.saving.serialize_keras_object(self.student),
                "teacher": keras.saving.serialize_keras_object(self.teacher), "distillation": self.distillation,
                "temperature": self.temperature, "alpha": self.alpha, "teacher_from_logits": self.teacher_from_logits}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("student", "teacher"):
            config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


def _distilled_head(student):
    if not isinstance(student, keras.Model):
        raise ValueError(f"`student` must be a keras_vit ViT (a keras.Model). Received: {type(student).__name__}")
    head = next((layer for layer in student.layers if layer.name == "predictions"), None)
    if not isinstance(head, DistilledHead):
        raise ValueError(f"`student` {student.name!r} has no distillation head: build it with "
                         "keras_vit.VisionTransformer(..., distillation_token=True) (or a variant builder's "
                         "distillation_token=True) and include_top=True")
    return head


def check_teacher(student, teacher):
    """Checks that `student` is a distilled keras_vit ViT and that `teacher` scores its images' classes.

    Returns:
        The student's `DistilledHead`.

    Raises:
        ValueError: a student without a distillation head; a teacher that is
            not a Keras model, whose input shape (height, width, channels) or
            number of classes differs from the student's (both named), or
            whose output is not `(batch, classes)`.
    """
    head = _distilled_head(student)
    classes = head.units
    if not isinstance(teacher, keras.Model):
        raise ValueError(f"`teacher` must be a keras.Model. Received: {type(teacher).__name__}")
    ours, theirs = tuple(student.input_shape[1:]), tuple(teacher.input_shape[1:])
    if len(theirs) != len(ours) or any(a is not None and b is not None and a != b for a, b in zip(ours, theirs)):
        raise ValueError(f"The teacher {teacher.name!r} takes images of shape {theirs}, the student "
                         f"{student.name!r} {ours}: give a teacher built for the student's images")
    out = teacher.output_shape
    if not (isinstance(out, tuple) and len(out) == 2):
        raise ValueError(f"The teacher {teacher.name!r} must output (batch, classes) scores. Received: output shape "
                         f"{out}")
    if out[-1] != classes:
        raise ValueError(f"The teacher {teacher.name!r} has {out[-1]} classes, the student {student.name!r} "
                         f"{classes}: they must score the same classes")
    return head
