"""Cut images into non-overlapping square patches (ViT paper, Sec. 3.1)."""

import keras
from keras import ops

from keras_vit.common.validation import check_bool, check_channels_last, check_positive_int, is_int


@keras.saving.register_keras_serializable(package="keras_vit")
class Patches(keras.layers.Layer):
    """Cuts images into non-overlapping `patch_size` x `patch_size` patches.

    Computes the sequence of flattened patches x_p of the ViT paper
    (arXiv:2010.11929, Sec. 3.1): an image of shape (H, W, C) becomes
    N = H * W / P^2 vectors of length P^2 * C. Patches come in row-major
    order (left to right, then top to bottom) and each patch is flattened in
    (row, column, channel) order, the order in which a (P, P, C, D) HWIO
    convolution kernel of the reference implementation flattens, so a
    strided "embedding" convolution equals `Patches` followed by a Dense
    layer with that kernel reshaped to (P * P * C, D).

    Built from one reshape, a rank-4 transpose and one reshape, never from
    TensorFlow's image patch-extraction op (its gradient fails under XLA,
    and TFLite and tf2onnx cannot convert it; docs/traps.md). The batch dimension may be unknown.

    Args:
        patch_size: int >= 1, the patch side P in pixels.
        flatten: bool, default True: output the patch sequence
            `(batch, num_patches, patch_dim)`. False keeps the patch grid,
            `(batch, height // P, width // P, patch_dim)`, which is what a
            model of any resolution passes to `PatchEncoder` (the grid tells
            it where each patch sits).
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Input shape:
        `(batch, height, width, channels)`, any float or integer dtype;
        height and width divisible by `patch_size`. Values are passed
        through unchanged (no scaling): pixels in [0, 255] stay in
        [0, 255].

    Output shape:
        `(batch, num_patches, patch_size * patch_size * channels)` with
        `num_patches = (height // patch_size) * (width // patch_size)`, in
        the layer's compute dtype (float32, or bfloat16/float16 under a
        mixed precision policy). With `flatten=False`:
        `(batch, height // patch_size, width // patch_size, patch_dim)`.
        Height and width may be unknown until call time.

    Raises:
        ValueError: `patch_size` is not a positive int; at build time, when
            `keras.config.image_data_format()` is "channels_first" (keras_vit
            reads channels-last images only; a `(batch, channels, height,
            width)` batch would be cut along its channels), the input is not
            rank 4, or height or width is not divisible by `patch_size` or is
            smaller than it (checked again at call time, before any
            TensorFlow op, when the input's size was unknown at build); at
            call time, a layer built for a fixed size given another known
            size (the message names both and the fixes).
        tf.errors.InvalidArgumentError: on TensorFlow, a layer built for a
            fixed size given, in graph mode, a batch whose size was unknown
            when the step was traced and differs when it runs (a `tf.data`
            pipeline without a resize): the same message, at the first such
            batch (`_check_built_size`).

    Example:

    >>> import numpy as np
    >>> patches = Patches(patch_size=4)
    >>> patches(np.zeros((2, 8, 12, 3), "uint8")).shape
    TensorShape([2, 6, 48])
    """

    def __init__(self, patch_size, flatten=True, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int("patch_size", patch_size)
        check_bool("flatten", flatten)
        self.flatten = flatten

    def build(self, input_shape):
        check_channels_last("Patches")
        if len(input_shape) != 4:
            raise ValueError(
                "Patches expects images of shape (batch, height, width, channels). "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self._check_size(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: input_shape[-1]})
        # A fixed-size model knows its size: a batch of another size is named in `_check_built_size`.
        self._built_size = tuple(int(d) for d in input_shape[1:3]) if all(is_int(d) for d in input_shape[1:3]) else None

    def _check_size(self, shape):
        for axis, size in (("height", shape[1]), ("width", shape[2])):
            if is_int(size) and (size < self.patch_size or size % self.patch_size):
                raise ValueError(
                    f"Image {axis} must be a multiple of patch_size={self.patch_size} "
                    f"(and at least that large). Received: input_shape={tuple(shape)}"
                )

    def _wrong_size(self, got=None):
        height, width = self._built_size
        got = "another size (its height and width follow this message)" if got is None else f"{got} (height x width)"
        return (f"This model was built for {height}x{width} images (input_shape=({height}, {width}, C)) and got a "
                f"batch of {got}. Resize the images in the pipeline (keras_vit.data's "
                "image_size=..., or keras.layers.Resizing), or build the model with input_shape=(None, None, C) to "
                "take any size (keras_vit.resize turns a trained model into one)")

    def _check_built_size(self, inputs):
        """Checks a batch's height and width against the size a fixed-size model was built for (issue 29).

        A known size is checked here, at trace time. On TensorFlow, a size
        unknown when the step was traced (a `tf.data` pipeline that decodes
        images without resizing them: element spec `(None, None, None, C)`)
        is checked when each batch runs: an `InvalidArgumentError` carrying
        this message stops the first batch of another size, before the
        position embeddings' add fails with a bare shape error. Under XLA
        the check is TensorFlow's `ensure_shape` (its Assert compiles to
        nothing), which names both shapes.
        """
        size = getattr(self, "_built_size", None)
        got = tuple(inputs.shape[1:3])
        if size is None or got == size:
            return inputs
        if all(is_int(d) for d in got):
            raise ValueError(self._wrong_size(f"{got[0]}x{got[1]}"))
        if keras.backend.backend() != "tensorflow":
            return inputs
        import tensorflow as tf

        shape = tf.shape(inputs)[1:3]
        check = tf.debugging.Assert(tf.reduce_all(tf.equal(shape, size)),
                                    [self._wrong_size(), shape], summarize=2)
        with tf.control_dependencies([check]):
            inputs = tf.identity(inputs)
        return tf.ensure_shape(inputs, (None, *size, None))

    def call(self, inputs):
        stand_in = _is_stand_in(inputs)
        if not stand_in:
            self._check_size(tuple(inputs.shape))
            inputs = self._check_built_size(inputs)
        x = ops.cast(inputs, self.compute_dtype)
        p = self.patch_size
        _, height, width, channels = ops.shape(x)
        grid_h, grid_w = height // p, width // p
        if stand_in:
            # Shape inference of a model that wraps this one (issue 29): JAX's reshape cannot prove a symbolic size a
            # multiple of P, and PyTorch's stand-in size is 83 px. Cropped to whole patches, the reshape follows;
            # real images are never cropped (their size is checked above).
            x = x[:, : grid_h * p, : grid_w * p, :]
        # (B, H, W, C) -> (B*gh, P, gw, P*C): the rows of one patch row.
        x = ops.reshape(x, (-1, p, grid_w, p * channels))
        # -> (B*gh, gw, P, P*C): each patch's pixels together, (row, col, channel).
        x = ops.transpose(x, (0, 2, 1, 3))
        if not self.flatten:
            return ops.reshape(x, (-1, grid_h, grid_w, p * p * channels))
        return ops.reshape(x, (-1, grid_h * grid_w, p * p * channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        p = self.patch_size
        num_patches = None if height is None or width is None else (height // p) * (width // p)
        patch_dim = None if channels is None else p * p * channels
        if not self.flatten:
            return (batch, None if height is None else height // p, None if width is None else width // p, patch_dim)
        return (batch, num_patches, patch_dim)

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "flatten": self.flatten})
        return config


def _is_stand_in(x):
    """True where `x` is not a real batch but a stand-in of Keras' shape inference on JAX or PyTorch.

    When Keras infers the output of a layer that calls a model of any resolution (a subclassed `keras.Model`
    wrapping it, issue 29), JAX traces symbolic sizes (`jax.export`'s dimension variables, not ints) and PyTorch
    a tensor on the "meta" device, which holds no values, with unknown dimensions set to 83, then 89.
    """
    backend = keras.backend.backend()
    if backend == "jax":
        return not all(is_int(d) for d in x.shape[1:3])
    if backend == "torch":
        return getattr(getattr(x, "device", None), "type", None) == "meta"
    return False


@keras.saving.register_keras_serializable(package="keras_vit")
class ImageSizeCheck(keras.layers.Layer):
    """Passes images through unchanged after checking their height and width.

    A model of any resolution (`input_shape=(None, None, C)`) learns its
    input size only when called; this layer raises a clear ValueError there,
    before any TensorFlow op runs, instead of a reshape error from deep
    inside TensorFlow. It adds no op to the graph, so a size that is unknown
    when a graph is traced (a `tf.function` of signature (None, None, None,
    C)) is not checked: a wrong one then fails in the patches' reshape. For a hybrid the multiple
    is the ResNet's output stride times `patch_size` (paper Sec. 3.1).

    Args:
        patch_size: int >= 1, the patch side in input pixels (or feature-map
            cells for a hybrid).
        stride: int >= 1, default 1: the hybrid ResNet's output stride.
        **kwargs: standard `keras.layers.Layer` arguments.

    Input/output shape:
        `(batch, height, width, channels)`, any dtype, unchanged.

    Raises:
        ValueError: at call time, when a known height or width is not a
            positive multiple of `patch_size * stride`; names the size and
            the patch size.
    """

    def __init__(self, patch_size, stride=1, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.stride = check_positive_int("stride", stride)

    def call(self, inputs):
        cell = self.patch_size * self.stride
        what = f"patch_size={self.patch_size}"
        if self.stride > 1:
            what += f" x the ResNet's output stride {self.stride} = {cell}"
        if _is_stand_in(inputs):
            return inputs  # Keras' shape inference on JAX or PyTorch: a stand-in size, not an image (issue 29)
        for axis, size in (("height", inputs.shape[1]), ("width", inputs.shape[2])):
            if is_int(size) and (size < cell or size % cell):
                raise ValueError(
                    f"Image {axis} must be a multiple of {what} (and at least that large). "
                    f"Received: an image of {axis} {size} (input shape {tuple(inputs.shape)})"
                )
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "stride": self.stride})
        return config
