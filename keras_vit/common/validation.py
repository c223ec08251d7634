"""Argument checks shared by the layers and builders.

Each raises `ValueError` naming the argument, the value received and what is
allowed, before any TensorFlow op runs.
"""

import numbers

import keras
import numpy as np


def is_int(value):
    """True for Python and NumPy integers, False for bools and everything else."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def check_positive_int(name, value):
    """Returns `value` as an int if it is an integer >= 1 (NumPy ints too), else raises ValueError."""
    if not is_int(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    return int(value)


def parse_image_size(value, argument="--image-size"):
    """An image size in pixels, as the command lines take it: "N" (square), "H,W" or "HxW", an int or an (H, W) pair.

    Returns:
        None for None, else `(height, width)`, two ints >= 1.

    Raises:
        ValueError: anything else; names `argument` and the forms it takes.
    """
    if value is None:
        return None
    items = value.lower().replace("x", ",").split(",") if isinstance(value, str) else (
        list(value) if isinstance(value, (tuple, list)) else [value])
    try:
        sizes = [int(v.strip()) if isinstance(v, str) else v for v in items]
    except ValueError:
        sizes = []
    if len(sizes) not in (1, 2) or not all(is_int(s) and s >= 1 for s in sizes):
        raise ValueError(f"{argument} must be N or H,W (pixels, ints >= 1). Received: {argument} {value}")
    return (int(sizes[0]), int(sizes[-1]))


def check_image_size(size, cell, what, argument="--image-size"):
    """Returns `size` ((height, width) in pixels) when both sides are positive multiples of `cell`, else raises.

    Args:
        size: `(height, width)`, e.g. `parse_image_size`'s result.
        cell: int, the pixels one patch covers: the patch size (times a hybrid's ResNet stride).
        what: where `cell` comes from, for the message, e.g. "the patch size of --variant ViTS32".

    Raises:
        ValueError: "--image-size must be a multiple of 32 px, the patch size of --variant ViTS32. Received:
            --image-size 48": one message for every command line.
    """
    if any(side < cell or side % cell for side in size):
        shown = str(size[0]) if size[0] == size[1] else f"{size[0]},{size[1]}"
        raise ValueError(f"{argument} must be a multiple of {cell} px, {what}. Received: {argument} {shown}")
    return tuple(size)


def check_rate(name, value):
    """Raises ValueError unless `value` is a real number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a float in [0, 1). Received: {name}={value!r}")


def check_choice(name, value, choices):
    """Raises ValueError unless `value` is one of `choices`."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {allowed}. Received: {name}={value!r}")


def check_bool(name, value):
    """Raises ValueError unless `value` is True or False."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")


def check_channels_last(where, data_format=None):
    """Raises ValueError unless images are channels-last, the only layout keras_vit reads.

    keras_vit's layers, models, checkpoint loaders, data pipelines and exports
    all take images as `(batch, height, width, channels)`. Under
    `keras.config.set_image_data_format("channels_first")` a `(batch, channels,
    height, width)` batch would be read with its channels as the height, so it
    is refused, as is an explicit `data_format="channels_first"`.

    Args:
        where: str, the layer, function or argument that reads the images,
            named in the message.
        data_format: None (check `keras.config.image_data_format()`, the
            global format) or a layer's explicit `data_format` string.

    Raises:
        ValueError: the format checked is not "channels_last"; the message
            names it and gives the fix.
    """
    global_format = keras.config.image_data_format()
    if data_format is None:
        data_format, received = global_format, f"keras.config.image_data_format()={global_format!r}"
    else:
        received = f"data_format={data_format!r} (keras.config.image_data_format()={global_format!r})"
    if data_format != "channels_last":
        raise ValueError(
            f"{where} reads images as channels_last, (batch, height, width, channels): keras_vit does not "
            "support the channels_first data format. Call keras.config.set_image_data_format('channels_last') "
            f"and give images of shape (batch, height, width, channels). Received: {received}"
        )


def check_grid(name, value):
    """Returns None or a (rows, cols) tuple of ints >= 1; raises ValueError naming `name` otherwise."""
    if value is None:
        return None
    try:
        grid = tuple(value)
    except TypeError:
        grid = (value,)
    if len(grid) != 2 or not all(is_int(g) and g >= 1 for g in grid):
        raise ValueError(f"`{name}` must be None or (rows, cols), two ints >= 1. Received: {name}={value!r}")
    return int(grid[0]), int(grid[1])
