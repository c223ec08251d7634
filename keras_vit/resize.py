"""Change a trained keras_vit model's input resolution (ViT paper, Sec. 3.2)."""

import copy

import keras
import numpy as np

from keras_vit.common.validation import check_choice
from keras_vit.layers import ImageSizeCheck, PatchEncoder, Patches
from keras_vit.layers.position_embedding import INTERPOLATIONS
from keras_vit.models.resnet import output_stride
from keras_vit.models.vit import resolve_input_shape
from keras_vit.weights.loader import describe, resnet_num_layers
from keras_vit.weights.resample import resample_position_embedding

_SIZE_CHECK = "image_size_check"


def resize(model, input_shape, interpolation=None):
    """Returns a copy of a keras_vit model for another input resolution.

    The paper's fine-tuning at higher resolution (arXiv:2010.11929, Sec. 3.2):
    "we keep the patch size the same, which results in a larger effective
    sequence length [...] we perform 2D interpolation of the pre-trained
    position embeddings, according to their location in the original image."
    The new model is rebuilt from `model.get_config()` with the new input
    shape; every weight is copied by layer name, and the learned position
    tables are resampled once with `keras_vit.weights.resample_position_embedding`:
    "learned" as a (rows, cols) grid with the class-token row kept,
    "learned_2d" each axis table (cols or rows, hidden_size / 2) as a one-column
    grid. "sincos_2d" and "none" have no weights to resample. The head,
    `pre_logits`, the hybrid's ResNet and every other weight, each layer's
    dtype policy, `trainable` flags and the model's name are kept; the new
    model is not compiled (compile it to train).

    A fixed `input_shape` gives a fixed-size model whose position tables
    cover its patch grid (height / cell, width / cell), cell = `patch_size`
    x the hybrid ResNet's output stride: its outputs equal, within float32
    rounding, those of the model of any resolution that resamples at call
    time (`PatchEncoder`), and at the model's own size they are identical to
    the original's. Height or width None gives a model of any resolution
    that keeps the trained table grid and resamples at call time.

    Args:
        model: a keras_vit Vision Transformer (built by `VisionTransformer`
            or a variant builder, pure or hybrid, any position embedding,
            with or without head or pooling; or loaded from `.keras`): a
            functional `keras.Model` with layers `patches` (`Patches`) and
            `patch_encoder` (`PatchEncoder`) and one image input.
        input_shape: (height, width, channels): height and width positive
            multiples of the cell (pixels), or None (any resolution);
            channels equal to the model's.
        interpolation: None (default: the model's own,
            `patch_encoder.interpolation`), "bilinear" (the reference rule,
            scipy's `zoom(order=1)`) or "bicubic" (TensorFlow's). When given
            it also becomes the new model's rule for call-time resampling.

    Returns:
        A new `keras.Model` with input `(batch, height, width, channels)`;
        outputs as the original's (`(batch, classes)`, or
        `(batch, seq_len, hidden_size)` without head and pooling, seq_len
        following the new patch grid).

    Raises:
        ValueError: `model` is not a keras_vit functional model with one image
            input; `input_shape` is not (height, width, channels) of positive
            ints or None, its height or width is not a multiple of the cell,
            or its channels differ from the model's; `interpolation` is not
            None, "bilinear" or "bicubic". Each message names the argument and
            the value received.

    Example:

    >>> import keras_vit
    >>> model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1,
    ...     num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=10)
    >>> tuple(keras_vit.resize(model, (32, 24, 3)).get_layer("patch_encoder").position_embedding.shape)
    (1, 49, 32)
    >>> keras_vit.resize(model, (None, None, 3)).input_shape
    (None, None, None, 3)
    """
    patches, encoder = _check_model(model)
    if interpolation is not None:
        check_choice("interpolation", interpolation, INTERPOLATIONS)
    stride = output_stride(resnet_num_layers(model)) if resnet_num_layers(model) else 1
    channels = model.input_shape[-1]
    if not isinstance(input_shape, (tuple, list)) or len(input_shape) != 3 or input_shape[2] != channels:
        raise ValueError(
            f"`input_shape` must be (height, width, channels) with the model's {channels} channels. "
            f"Received: input_shape={input_shape!r}"
        )
    height, width, _ = resolve_input_shape(input_shape, None, patches.patch_size, stride)
    dynamic = height is None or width is None
    cell = patches.patch_size * stride
    old_grid = tuple(describe(model)["grid"])
    new_grid = old_grid if dynamic else (height // cell, width // cell)
    interpolation = interpolation or encoder.interpolation

    config = copy.deepcopy(model.get_config())
    input_name = model.inputs[0]._keras_history.operation.name
    layers = config["layers"]
    for layer in layers:
        layer.pop("build_config", None)  # built again from the new input when the graph is rebuilt
        if layer["name"] == input_name:
            layer["config"]["batch_shape"] = [None, height, width, channels]
        elif layer["name"] == patches.name:
            layer["config"]["flatten"] = not dynamic
        elif layer["name"] == encoder.name:
            layer["config"]["grid_size"] = list(new_grid)
            layer["config"]["interpolation"] = interpolation
    has_check = any(layer["name"] == _SIZE_CHECK for layer in layers)
    if dynamic and not has_check:
        _insert_size_check(layers, input_name, patches, stride)
    elif not dynamic and has_check:
        _remove_size_check(layers, input_name)
    resized = keras.Model.from_config(config)

    for layer in resized.layers:
        if layer.name == encoder.name:
            _copy_encoder(encoder, layer, old_grid, new_grid, interpolation)
        elif layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return resized


def _check_model(model):
    """Returns the model's (patches, patch_encoder) layers; raises ValueError for anything else."""
    what = f"model={getattr(model, 'name', model)!r} of type {type(model).__name__}"
    if not isinstance(model, keras.Model):
        raise ValueError(f"`model` must be a keras_vit Vision Transformer (a keras.Model). Received: {what}")
    names = {layer.name: layer for layer in model.layers}
    patches, encoder = names.get("patches"), names.get("patch_encoder")
    if not isinstance(patches, Patches) or not isinstance(encoder, PatchEncoder):
        raise ValueError(
            "`model` must be a keras_vit Vision Transformer with a 'patches' (Patches) and a 'patch_encoder' "
            f"(PatchEncoder) layer. Received: {what}"
        )
    try:
        config = model.get_config()
    except NotImplementedError:  # a subclassed model
        config = {}
    if not isinstance(config, dict) or "input_layers" not in config or len(model.inputs) != 1:
        raise ValueError(
            "`model` must be a functional keras_vit model with one image input (as the builders make and "
            f"`.keras` files hold). Received: {what}"
        )
    return patches, encoder


def _consumers(layers, name):
    """Yields every serialized keras tensor in `layers`' inbound nodes that points at layer `name`."""

    def walk(obj):
        if isinstance(obj, dict):
            if obj.get("class_name") == "__keras_tensor__" and obj["config"]["keras_history"][0] == name:
                yield obj
            for value in obj.values():
                yield from walk(value)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                yield from walk(value)

    for layer in layers:
        yield from walk(layer.get("inbound_nodes", []))


def _insert_size_check(layers, input_name, patches, stride):
    """Puts an `ImageSizeCheck` between the image input and the layers that read it (as the builder does)."""
    references = list(_consumers(layers, input_name))
    reference = copy.deepcopy(references[0])  # the image tensor: shape, dtype, keras_history
    for tensor in references:
        tensor["config"]["keras_history"] = [_SIZE_CHECK, 0, 0]
    check = ImageSizeCheck(patches.patch_size, stride, name=_SIZE_CHECK, dtype=patches.dtype_policy)
    entry = keras.saving.serialize_keras_object(check)
    entry.update({"name": _SIZE_CHECK, "inbound_nodes": [{"args": [reference], "kwargs": {}}]})
    entry.pop("build_config", None)
    position = next(i for i, layer in enumerate(layers) if layer["name"] == input_name) + 1
    layers.insert(position, entry)


def _remove_size_check(layers, input_name):
    """Takes the `ImageSizeCheck` out; the layers that read it read the image input again."""
    for tensor in list(_consumers(layers, _SIZE_CHECK)):
        tensor["config"]["keras_history"] = [input_name, 0, 0]
    layers[:] = [layer for layer in layers if layer["name"] != _SIZE_CHECK]


def _copy_encoder(old, new, old_grid, new_grid, interpolation):
    """Copies the patch encoder's weights; the learned tables resampled once from `old_grid` to `new_grid`."""
    new.projection.set_weights(old.projection.get_weights())
    if old.class_token:
        # A copy: on JAX, assigning the variable itself shares its buffer, which the new model's first jitted
        # call frees (donation), and the old model lost its class token ("Array has been deleted").
        new.cls.assign(keras.ops.convert_to_numpy(old.cls))
    if old.distillation_token:
        new.dist.assign(keras.ops.convert_to_numpy(old.dist))
    kind = old.position_embedding_kind
    if kind == "learned":
        table = keras.ops.convert_to_numpy(old.position_embedding)
        if tuple(new_grid) != tuple(old_grid):
            table = resample_position_embedding(
                table, new_grid, old.prefix_tokens, source_grid=old_grid, interpolation=interpolation
            )
        new.position_embedding.assign(table)
    elif kind == "learned_2d":
        for variable, size, new_variable in (
            (old.position_embedding_x, new_grid[1], new.position_embedding_x),
            (old.position_embedding_y, new_grid[0], new.position_embedding_y),
        ):
            table = keras.ops.convert_to_numpy(variable)
            if size != len(table):  # one axis of the grid: a (n, 1) grid, no class-token row
                table = resample_position_embedding(
                    table, (size, 1), 0, source_grid=(len(table), 1), interpolation=interpolation
                )[0]
            new_variable.assign(np.asarray(table))
