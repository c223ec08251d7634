"""A model's image size as export sees it: fixed or any resolution, the patch cell, the sizes artifacts take."""

import keras

from keras_vit.common.validation import is_int


def image_shape(model):
    """Returns (height, width, channels) of a model's image input.

    Raises:
        ValueError: the model does not take one 4-D image input of known
            height, width and channels.
    """
    shape = model.input_shape
    if isinstance(shape, list) or len(shape) != 4 or any(d is None for d in shape[1:]):
        raise ValueError(
            "Export needs a model with one image input of shape (batch, height, width, channels), all but "
            f"batch known. Received: a model with input_shape={shape}"
        )
    return tuple(int(d) for d in shape[1:])


def model_image_shape(model):
    """Returns (height, width, channels) of a model's image input; height and width None where any size is taken.

    A keras_vit model built with `input_shape=(None, None, C)` (issue 13)
    takes any height and width that are multiples of its `cell_size`.

    Raises:
        ValueError: the model does not take one 4-D image input of known
            channels.
    """
    shape = model.input_shape
    if isinstance(shape, list) or len(shape) != 4 or shape[3] is None:
        raise ValueError(
            "Export needs a model with one image input of shape (batch, height, width, channels), channels "
            f"known. Received: a model with input_shape={shape}"
        )
    return tuple(None if d is None else int(d) for d in shape[1:])


def is_dynamic(model):
    """True if the model takes images of any height or width (`input_shape=(None, None, C)`)."""
    return None in model_image_shape(model)[:2]


def cell_size(model):
    """The pixels per patch side: the sizes a model takes are multiples of it (1: any size).

    `patch_size` times the hybrid ResNet's output stride, read from the
    model's `ImageSizeCheck` layer (keras_vit models of any resolution) or
    from its `Patches` layer and input size (fixed-size models, and any-size
    models whose `Patches` take any size). 1 where nothing constrains the
    size: a model that resizes its input to a fixed size before its patches
    (`keras.layers.Resizing`), or one with no keras_vit `Patches` layer.
    """
    from keras_vit.layers import ImageSizeCheck, Patches

    layers = all_layers(model)
    for layer in layers:
        if isinstance(layer, ImageSizeCheck):
            return layer.patch_size * layer.stride
    patches = [layer for layer in layers if isinstance(layer, Patches)]
    if not patches:
        return 1
    height, grid_height = model_image_shape(model)[0], patches[0].input.shape[1]
    if height is None:  # any size: resized to a fixed size before the patches, or cut into patches as it comes
        return 1 if grid_height is not None else patches[0].patch_size
    stride = height // grid_height if grid_height else 1
    return patches[0].patch_size * stride


PAPER_IMAGE_SIZE = 224  # the ViT paper's fine-tuning and pre-training resolution
# The most patches an export size may give: 16,384 (2,048 px a side at patch 16), whose one attention map of one
# head is 1 GiB in float32; verification runs a batch of them. A larger size failed verification late, out of memory.
MAX_TOKENS = 16_384


def default_image_size(model):
    """The (height, width) a model's fixed-size artifacts take when no `image_size` is given.

    A fixed-size model: its input size. A model of any resolution, the
    first of:
    - the size its `Patches` layer takes, where the model resizes its input
      to a fixed size first (`keras.layers.Resizing`);
    - its position-embedding table's patch grid times `cell_size` (the size
      it was built for, `keras_vit.weights.loader.describe(model)["grid"]`;
      224 px for a table of the default grid);
    - the size of its first `keras.layers.Resizing` layer;
    - the paper's 224 px, rounded down to a multiple of `cell_size`.
    A known height or width is kept.
    """
    from keras_vit.layers import PatchEncoder, Patches

    height, width, _ = model_image_shape(model)
    if height is not None and width is not None:
        return height, width
    layers = all_layers(model)
    patches = [layer for layer in layers if isinstance(layer, Patches)]
    encoders = [layer for layer in layers if isinstance(layer, PatchEncoder) and layer.grid_size is not None]
    resizing = [layer for layer in layers if isinstance(layer, keras.layers.Resizing)]
    cell = cell_size(model)
    if patches and all(is_int(d) for d in patches[0].input.shape[1:3]):
        size = tuple(int(d) for d in patches[0].input.shape[1:3])
    elif encoders:
        rows, cols = encoders[0].grid_size
        size = (rows * cell, cols * cell)
    elif resizing:
        size = (int(resizing[0].height), int(resizing[0].width))
    else:
        side = max(cell, PAPER_IMAGE_SIZE // cell * cell)
        size = (side, side)
    return (height or size[0]), (width or size[1])


def parse_image_size(value, model, argument="image_size"):
    """Checks an export resolution against a model: None, "dynamic", or (height, width) in pixels.

    Args:
        value: None (the model's own size, `default_image_size`); an int
            or "S" (square); "H,W" or (H, W); or "dynamic" (.tflite files
            keep a dynamic height and width: a model of any resolution only,
            float32, float16 and dynamic_int8, see
            `export.tflite.DYNAMIC_SIZE_QUANTIZATIONS`).
        model: the Keras model (its `cell_size` and input shape).
        argument: the name used in messages ("image_size" or
            "--image-size").

    Returns:
        None, "dynamic" or a `(height, width)` tuple of ints.

    Raises:
        ValueError: a bad format, a size that is not a positive multiple of
            `cell_size` (the patch size, times the hybrid's stride), "dynamic"
            for a fixed-size model, a size that changes an axis the model
            fixed, or one of more than `MAX_TOKENS` patches; names
            `argument`, the value and the patch size.
    """
    if value is None:
        return None
    cell = cell_size(model)
    patch = _patch_size(model)
    if cell == 1:
        need = "input size: any (it resizes its input, or has no patch grid)"
    else:
        need = f"patch_size {cell}" if cell == patch else f"patch_size {patch} x the ResNet's stride = {cell}"
    if isinstance(value, str) and value.strip().lower() == "dynamic":
        if not is_dynamic(model):
            raise ValueError(f"{argument}=dynamic needs a model of any resolution (built with input_shape=(None, None, C)); "
                             f"this model's input is fixed at {model_image_shape(model)}. Received: {argument}={value!r}")
        return "dynamic"
    items = value.lower().replace("x", ",").split(",") if isinstance(value, str) else (
        [value] if not isinstance(value, (tuple, list)) else list(value))
    try:
        sizes = [int(v.strip()) if isinstance(v, str) else v for v in items]
    except ValueError:
        sizes = None
    multiples = "positive ints" if cell == 1 else f"multiples of the model's {need}"
    if (sizes is None or len(sizes) not in (1, 2) or not all(is_int(s) for s in sizes)):
        raise ValueError(f"{argument} must be H or H,W: one or two ints, {multiples}, "
                         f"or 'dynamic'. Received: {argument}={value!r}")
    height, width = [int(s) for s in sizes * 2] if len(sizes) == 1 else [int(s) for s in sizes]  # NumPy ints too
    if any(s < cell or s % cell for s in (height, width)):
        raise ValueError(f"{argument} must be {'positive ints' if cell == 1 else 'positive ' + multiples} "
                         f"(e.g. {max(cell * 4, 224 // cell * cell)}). Received: {argument}={value!r}")
    tokens = (height // cell) * (width // cell) if cell > 1 else 0  # a model that resizes first: its own count
    if tokens > MAX_TOKENS:
        gib = tokens * tokens * 4 / 2**30
        raise ValueError(f"{argument} {height},{width} cuts each image into {tokens:,d} patches ({need}): one "
                         f"attention map alone would take {gib:,.0f} GiB. Export at most {MAX_TOKENS:,d} patches "
                         f"(e.g. {int(MAX_TOKENS ** 0.5) * cell} px a side). Received: {argument}={value!r}")
    own = model_image_shape(model)[:2]
    if is_dynamic(model) and any(o is not None and o != s for o, s in zip(own, (height, width))):
        raise ValueError(f"the model fixes its input at {own} (None: any size); {argument} cannot change a fixed "
                         f"axis. Received: {argument}={value!r}")
    return height, width


def _patch_size(model):
    """The patch size of the model's first keras_vit `Patches` layer, or None where it has none."""
    from keras_vit.layers import Patches

    return next((layer.patch_size for layer in all_layers(model) if isinstance(layer, Patches)), None)


def other_image_size(model, image_size):
    """The second size a dynamic-size artifact is verified at, besides `image_size` (height, width).

    The table's own size (`default_image_size`) when `image_size` is
    another; else one patch row and two patch columns more on the axes the
    model leaves free (a rectangular size, so that height and width are each
    checked).
    """
    own = default_image_size(model)
    if tuple(own) != tuple(image_size):
        return tuple(own)
    cell = cell_size(model)
    height, width, _ = model_image_shape(model)
    return (image_size[0] + (cell if height is None else 0), image_size[1] + (2 * cell if width is None else 0))


def all_layers(model):
    """Every layer of a model, nested models and sublayers included."""
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True)]
