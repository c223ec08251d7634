"""The one generic functional ViT builder (ViT paper, Sec. 3.1 and 3.2)."""

import os

import keras
import numpy as np

from keras_vit.common.validation import (
    check_bool,
    check_channels_last,
    check_choice,
    check_grid,
    check_positive_int,
    check_rate,
    is_int,
)
from keras_vit.layers import (ClassifierHead, DistilledHead, ImageSizeCheck, LayerNormalization, Patches, PatchEncoder,
                              SequencePooling, TransformerBlock)
from keras_vit.layers.classifier_head import check_class_names
from keras_vit.layers.position_embedding import INTERPOLATIONS, POSITION_EMBEDDINGS
from keras_vit.models import checkpoint_hook
from keras_vit.models.resnet import output_stride as resnet_output_stride
from keras_vit.models.resnet import resnet_features

CLASSIFIERS = ("token", "gap")
POOLINGS = (None, "token", "avg", "max")
PRETRAINED_NAMES = ("imagenet", "imagenet21k")  # see keras_vit.weights.registry.DEFAULTS
DEFAULT_INPUT_SHAPE = (224, 224, 3)


def VisionTransformer(
    patch_size=16,
    hidden_size=768,
    num_layers=12,
    num_heads=12,
    mlp_dim=3072,
    representation_size=None,
    classifier="token",
    class_token=None,
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    stochastic_depth_rate=0.0,
    layer_norm_epsilon=1e-6,
    approximate_gelu=False,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classes=1000,
    classifier_activation="softmax",
    name="vision_transformer",
    resnet_num_layers=None,
    resnet_width_factor=1,
    position_embedding="learned",
    position_embedding_grid=None,
    position_embedding_interpolation="bilinear",
    include_preprocessing=False,
    class_names=None,
    distillation_token=False,
):
    """Builds a Vision Transformer as a functional `keras.Model`.

    The architecture of "An Image is Worth 16x16 Words" (Dosovitskiy et al.,
    ICLR 2021, arXiv:2010.11929), Sec. 3.1, as in the reference
    `VisionTransformer` (google-research/vision_transformer, `models_vit.py`):

        patches -> patch_encoder (Eq. 1) -> transformer_block_0..L-1
        (Eq. 2-3) -> encoder_norm (Eq. 4) -> pooling -> [pre_logits] ->
        predictions

    The head `predictions` is a zero-initialised Dense layer (paper Sec. 3.2,
    fine-tuning; `keras_vit.layers.ClassifierHead`, which also keeps the
    class names); `pre_logits` is Dense + tanh of width `representation_size`
    (the pre-training head of the reference code). Stochastic depth grows
    linearly from 0 at the first block to `stochastic_depth_rate` at the last
    (the rule of DeiT and timm). Layer names are a contract for weight
    conversion and export: `patches`, `patch_encoder`, `transformer_block_{i}`,
    `encoder_norm`, `pooling`, `pre_logits`, `predictions`; with
    `include_preprocessing`, `rescaling` comes first.

    Args:
        patch_size: int >= 1, patch side P in pixels; must divide the image
            height and width.
        hidden_size: int >= 1, token width D (Table 1 "Hidden size").
        num_layers: int >= 1, number of encoder blocks L (Table 1 "Layers").
        num_heads: int >= 1, attention heads; must divide `hidden_size`.
        mlp_dim: int >= 1, MLP width (Table 1 "MLP size").
        representation_size: None or int >= 1. Width of the `pre_logits`
            Dense + tanh layer before the head; None leaves it out.
        classifier: "token" (class token, default) or "gap" (global average
            pooling of the patch tokens).
        class_token: None (default: True for "token", False for "gap") or a
            bool. "token" needs a class token.
        dropout_rate: float in [0, 1), default 0.
        attention_dropout_rate: float in [0, 1), default 0.
        stochastic_depth_rate: float in [0, 1), default 0.
        layer_norm_epsilon: float > 0, default 1e-6 (the reference value).
        approximate_gelu: bool, default False (exact GELU); True uses the
            tanh approximation of the original JAX ViT.
        include_top: bool, default True. Whether to include the head.
        weights: None (random initialisation); "imagenet" (ImageNet-21k
            pre-trained, ImageNet-1k fine-tuned, 1000-class head) or
            "imagenet21k" (pre-trained only) for a configuration of a
            published variant; a name from `keras_vit.weights.CHECKPOINTS`;
            a checkpoint file (Google `.npz`, Hugging Face or timm
            `.safetensors`), loaded by `keras_vit.weights.load_pretrained`
            (position embeddings resampled to this resolution, head zeroed
            with a message when `classes` differs); or a Keras
            `.weights.h5` file saved from a model of this configuration.
            Names are downloaded once to `~/.keras/models/keras_vit/` with a
            SHA-256 check.
        input_tensor: optional Keras tensor (output of `keras.Input` or of
            a Keras layer) of shape (batch, height, width, channels) to use
            as image input.
        input_shape: optional (height, width, channels) tuple, default
            (224, 224, 3). Channels must be known. Height and/or width None
            builds a model of any resolution: it accepts every height and
            width that is a multiple of `patch_size` (x the hybrid's output
            stride) and resamples its position embeddings to the input's
            patch grid at call time (`PatchEncoder`); under XLA each new
            input shape compiles once.
        pooling: with `include_top=False`: None (output the whole sequence),
            "token" (class token state), "avg" or "max" over the patch tokens.
            Ignored when `include_top=True`, where `classifier` decides.
        classes: int >= 1, number of classes of the head, default 1000.
        classifier_activation: activation of the head: None or "linear" for
            logits, "softmax" (default), any other name `keras.activations.get`
            knows, or a callable.
        name: model name.
        resnet_num_layers: None (a pure ViT, default) or a tuple of ints >= 1,
            the units per stage of the hybrid's ResNet (paper Sec. 3.1
            "Hybrid Architecture"; `keras_vit.models.resnet`): (3, 4, 9) for
            R50 cut after stage 3 (output stride 16), (3, 4, 6, 3) or
            (2, 2, 2, 2) (R26) for stride 32. The patches are then cut from
            its feature map: `patch_size` counts feature-map cells (1 in the
            reference configurations), and image height and width must be
            multiples of output stride x `patch_size`.
        resnet_width_factor: int >= 1, the ResNet's width factor (default 1).
        position_embedding: "learned" (default, the paper's 1D table),
            "learned_2d" (X and Y tables of hidden_size / 2), "sincos_2d"
            (fixed, big_vision/MAE) or "none": the choices of the paper's
            Appendix D.4, Table 8 (`PatchEncoder`).
        position_embedding_grid: None or (rows, cols): the patch grid of the
            position-embedding tables. Default: the input's grid, or for an
            unknown height or width that of a 224 px side (14 for P = 16).
        position_embedding_interpolation: "bilinear" (default, the
            reference rule) or "bicubic": how the learned tables are
            resampled to an input grid other than theirs (the rules of
            `keras_vit.weights.resample_position_embedding`).
        include_preprocessing: bool, default False. True puts the scaling
            of `keras_vit.preprocess_input`, x / 127.5 - 1, inside the model
            as its first layer (`keras.layers.Rescaling(1 / 127.5,
            offset=-1)`, named `rescaling`), so the model takes raw pixels in
            [0, 255], as `keras.applications`' EfficientNetV2 and ConvNeXt
            do; `keras-vit-export` reads that from the layer. False (the
            default, and the published checkpoints' convention): the model
            takes images already scaled to [-1, 1].
        class_names: None (default) or a list of `classes` distinct class
            names (str), output `i` named `class_names[i]`; kept by the head
            (`keras_vit.layers.ClassifierHead`) in the model's config, so
            they travel inside its `.keras` file to `keras-vit-export`.
            Needs `include_top=True`.
        distillation_token: bool, default False. True builds DeiT's
            distilled ViT (Touvron et al., ICML 2021, Sec. 4; reference
            `DistilledVisionTransformer`): a learned distillation token after
            the class token, with its own position-embedding row
            (`PatchEncoder`), and a second head on its final state; the head
            `predictions` (`keras_vit.layers.DistilledHead`) averages the two
            heads' logits, then applies `classifier_activation`. Train it
            against a teacher with `keras_vit.distillation.Distiller`. With
            `include_top=False`, pooling "token" gives the mean of the two
            tokens' states (timm's features). Needs `classifier="token"` and
            no `representation_size` (DeiT has no pre-logits layer).

    Input:
        `(batch, height, width, channels)` images, float32 (integer data is
        cast): scaled to [-1, 1] by `keras_vit.preprocess_input` (what the
        published ViT checkpoints expect), or raw pixels in [0, 255] with
        `include_preprocessing=True`.

    Output:
        `include_top=True`: `(batch, classes)` float32 (probabilities with
        softmax, logits with None), float32 even under mixed precision.
        `include_top=False`: `(batch, seq_len, hidden_size)` for
        `pooling=None`, `(batch, hidden_size)` otherwise, in the compute dtype.
        seq_len = (height / patch_size) * (width / patch_size) + class token
        (+ distillation token).

    Raises:
        ValueError: first, when `keras.config.image_data_format()` is
            "channels_first": keras_vit models, like their weights, data
            pipelines and exports, are channels-last only (call
            `keras.config.set_image_data_format("channels_last")`). Then for
            any argument outside the ranges above, naming it and
            the value received, before any TensorFlow op runs: a patch size
            larger than the image or not dividing it, `hidden_size` not
            divisible by `num_heads`, an unknown `classifier`, `pooling` or
            `classifier_activation`, `classifier="token"` without a class
            token, `input_tensor` and `input_shape` disagreeing, dropout rates
            outside [0, 1), an unknown weights value, or weights that do not
            load into this configuration (`keras_vit.weights.CheckpointError`,
            a ValueError naming the key and both shapes); `class_names`
            that are not `classes` distinct strings, or given without a head;
            `distillation_token` with `classifier="gap"` or a
            `representation_size`.

    Example:

    >>> model = VisionTransformer(patch_size=4, hidden_size=32, num_layers=2,
    ...     num_heads=4, mlp_dim=64, input_shape=(32, 32, 3), classes=10)
    >>> model.output_shape
    (None, 10)
    """
    check_channels_last("VisionTransformer")
    patch_size = check_positive_int("patch_size", patch_size)
    hidden_size = check_positive_int("hidden_size", hidden_size)
    num_layers = check_positive_int("num_layers", num_layers)
    num_heads = check_positive_int("num_heads", num_heads)
    mlp_dim = check_positive_int("mlp_dim", mlp_dim)
    classes = check_positive_int("classes", classes)
    if representation_size is not None:
        representation_size = check_positive_int("representation_size", representation_size)
    if hidden_size % num_heads:
        raise ValueError(
            "`hidden_size` must be divisible by `num_heads`. "
            f"Received: hidden_size={hidden_size}, num_heads={num_heads}"
        )
    check_choice("classifier", classifier, CLASSIFIERS)
    if class_token is None:
        class_token = classifier == "token"
    check_bool("class_token", class_token)
    if classifier == "token" and not class_token:
        raise ValueError(
            "`classifier='token'` needs a class token. Received: class_token=False "
            "(use classifier='gap' for a model without one)"
        )
    check_choice("pooling", pooling, POOLINGS)
    check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
    check_choice("position_embedding_interpolation", position_embedding_interpolation, INTERPOLATIONS)
    if pooling == "token" and not class_token:
        raise ValueError("`pooling='token'` needs a class token. Received: class_token=False")
    _check_activation(classifier_activation)
    for arg, value in (
        ("dropout_rate", dropout_rate),
        ("attention_dropout_rate", attention_dropout_rate),
        ("stochastic_depth_rate", stochastic_depth_rate),
    ):
        check_rate(arg, value)
    check_bool("include_top", include_top)
    check_bool("approximate_gelu", approximate_gelu)
    check_bool("include_preprocessing", include_preprocessing)
    check_bool("distillation_token", distillation_token)
    if distillation_token and classifier != "token":
        raise ValueError("`distillation_token=True` (DeiT) reads the class token: it needs classifier='token'. "
                         f"Received: classifier={classifier!r}")
    if distillation_token and representation_size is not None:
        raise ValueError("`distillation_token=True` (DeiT) has no pre-logits layer: leave representation_size None. "
                         f"Received: representation_size={representation_size!r}")
    if class_names is not None and not include_top:
        raise ValueError("`class_names` names the head's classes and needs include_top=True. "
                         f"Received: class_names={class_names!r}, include_top=False")
    class_names = check_class_names(class_names, classes)
    weights_kind = _check_weights(weights)
    stride = 1
    if resnet_num_layers is None and resnet_width_factor != 1:
        raise ValueError(
            "`resnet_width_factor` needs `resnet_num_layers` (a hybrid). "
            f"Received: resnet_width_factor={resnet_width_factor!r}, resnet_num_layers=None"
        )
    if resnet_num_layers is not None:
        if not isinstance(resnet_num_layers, (tuple, list)) or not resnet_num_layers or not all(
            is_int(n) and n >= 1 for n in resnet_num_layers
        ):
            raise ValueError(
                "`resnet_num_layers` must be None or a non-empty tuple of positive ints such as (3, 4, 9). "
                f"Received: resnet_num_layers={resnet_num_layers!r}"
            )
        resnet_num_layers = tuple(int(n) for n in resnet_num_layers)
        resnet_width_factor = check_positive_int("resnet_width_factor", resnet_width_factor)
        stride = resnet_output_stride(resnet_num_layers)
    input_shape = resolve_input_shape(input_shape, input_tensor, patch_size, stride)
    grid = _table_grid(position_embedding_grid, input_shape, patch_size * stride)
    dynamic = input_shape[0] is None or input_shape[1] is None
    if weights_kind == "checkpoint" and isinstance(weights, str) and _is_name(weights):
        weights = _pretrained_checkpoint(
            weights, (patch_size, hidden_size, num_layers, num_heads, mlp_dim), input_shape, resnet_num_layers
        )

    image_input = keras.Input(shape=input_shape, name="images") if input_tensor is None else input_tensor

    x = image_input
    if dynamic:
        x = ImageSizeCheck(patch_size, stride, name="image_size_check")(x)
    if include_preprocessing:  # keras_vit.preprocess_input's x / 127.5 - 1: the model takes [0, 255]
        x = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, name="rescaling")(x)
    if resnet_num_layers is not None:
        x = resnet_features(x, resnet_num_layers, resnet_width_factor)
    x = Patches(patch_size, flatten=not dynamic, name="patches")(x)
    x = PatchEncoder(
        hidden_size,
        class_token=class_token,
        dropout_rate=dropout_rate,
        position_embedding=position_embedding,
        grid_size=grid,
        interpolation=position_embedding_interpolation,
        distillation_token=distillation_token,
        name="patch_encoder",
    )(x)
    depth_rates = np.linspace(0.0, stochastic_depth_rate, num_layers) if num_layers > 1 else [stochastic_depth_rate]
    for i in range(num_layers):
        x = TransformerBlock(
            num_heads=num_heads,
            mlp_dim=mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            stochastic_depth_rate=float(depth_rates[i]),
            layer_norm_epsilon=layer_norm_epsilon,
            approximate_gelu=approximate_gelu,
            name=f"transformer_block_{i}",
        )(x)
    x = LayerNormalization(epsilon=layer_norm_epsilon, name="encoder_norm")(x)

    if include_top:
        mode = "tokens" if distillation_token else "token" if classifier == "token" else "avg"
        x = SequencePooling(mode, class_token=class_token, distillation_token=distillation_token, name="pooling")(x)
        if representation_size is not None:
            x = keras.layers.Dense(representation_size, activation="tanh", name="pre_logits")(x)
        x = (DistilledHead if distillation_token else ClassifierHead)(
            classes,
            class_names=class_names,
            kernel_initializer="zeros",
            activation=classifier_activation,
            dtype="float32",
            name="predictions",
        )(x)
    elif pooling is not None:
        x = SequencePooling(pooling, class_token=class_token, distillation_token=distillation_token, name="pooling")(x)

    inputs = image_input if input_tensor is None else keras.utils.get_source_inputs(input_tensor)
    model = keras.Model(inputs, x, name=name)
    if weights_kind == "keras":
        try:
            model.load_weights(weights)
        except Exception as e:  # not HDF5, or saved from another configuration
            raise ValueError(
                f"`weights` file could not be loaded into {name!r}: {type(e).__name__}: {str(e)[:300]}. "
                f"Received: weights={weights!r}"
            ) from None
    elif weights_kind == "checkpoint":
        checkpoint_hook.loader("load")(model, weights)  # keras_vit.weights' loader: models never imports weights
    return model


def _check_activation(classifier_activation):
    if classifier_activation is None or callable(classifier_activation):
        return
    try:
        keras.activations.get(classifier_activation)
    except (ValueError, TypeError):
        raise ValueError(
            "`classifier_activation` must be None, a callable or the name of a Keras activation "
            f"such as 'softmax' or 'linear'. Received: classifier_activation={classifier_activation!r}"
        ) from None


def _check_weights(weights):
    """Returns "none", "keras" (a .weights.h5 file) or "checkpoint" (a name or a .npz/.safetensors file)."""
    if weights is None:
        return "none"
    if isinstance(weights, str):  # names win over a file or folder of the same name in the working directory
        if _is_name(weights):
            return "checkpoint"
    if not isinstance(weights, (str, os.PathLike)) or not os.path.isfile(weights):
        raise ValueError(
            "`weights` must be None, 'imagenet', 'imagenet21k', a name from keras_vit.weights.CHECKPOINTS, "
            f"or the path of an existing .weights.h5, .npz or .safetensors file. Received: weights={weights!r}"
        )
    path = os.fspath(weights).lower()
    if path.endswith(".weights.h5"):
        return "keras"
    if path.endswith((".npz", ".safetensors")):
        return "checkpoint"
    raise ValueError(
        f"`weights` file must end in '.weights.h5', '.npz' or '.safetensors'. Received: weights={weights!r}"
    )


def _is_name(weights):
    return weights in PRETRAINED_NAMES or checkpoint_hook.loader("is_name")(weights)


def _pretrained_checkpoint(weights, config, input_shape, resnet_num_layers):
    """Returns the registry `Checkpoint` a name means for this configuration; raises ValueError if none."""
    return checkpoint_hook.loader("resolve")(weights, config, input_shape, resnet_num_layers)


def resolve_input_shape(input_shape, input_tensor, patch_size, stride=1):
    """Returns a validated (height, width, channels) tuple."""
    tensor_shape = None
    if input_tensor is not None:
        if not keras.backend.is_keras_tensor(input_tensor):
            raise ValueError(
                "`input_tensor` must be a Keras tensor (the output of `keras.Input` or of a Keras layer). "
                f"Received: input_tensor of type {type(input_tensor).__name__}"
            )
        tensor_shape = tuple(input_tensor.shape)[1:]
        if len(tensor_shape) != 3 or not all(_size_ok(d) for d in tensor_shape[:2]) or not _known(tensor_shape[2]):
            raise ValueError(
                "`input_tensor` must have shape (batch, height, width, channels) with channels known "
                f"(height and width known or None). Received: input_tensor with shape {tuple(input_tensor.shape)}"
            )
    if input_shape is None:
        input_shape = tensor_shape if tensor_shape is not None else DEFAULT_INPUT_SHAPE
    try:
        input_shape = tuple(input_shape)
    except TypeError:
        raise ValueError(
            f"`input_shape` must be a (height, width, channels) tuple. Received: input_shape={input_shape!r}"
        ) from None
    if len(input_shape) != 3 or not all(_size_ok(d) for d in input_shape[:2]) or not _known(input_shape[2]):
        raise ValueError(
            "`input_shape` must be a (height, width, channels) tuple of positive ints; height and width may "
            f"be None (any resolution). Received: input_shape={input_shape!r}"
        )
    input_shape = tuple(None if d is None else int(d) for d in input_shape)
    if tensor_shape is not None and tensor_shape != input_shape:
        raise ValueError(
            "`input_tensor` and `input_shape` disagree: "
            f"input_tensor has shape (batch, *{tensor_shape}), input_shape={input_shape}"
        )
    height, width, _ = input_shape
    cell = patch_size * stride
    what = "`patch_size`" if stride == 1 else f"the ResNet's output stride ({stride}) x `patch_size`"
    known = [d for d in (height, width) if d is not None]
    if known and cell > min(known):
        raise ValueError(
            f"{what} must not exceed the image size. Received: patch_size={patch_size} "
            f"for input_shape={input_shape}"
        )
    if any(d % cell for d in known):
        raise ValueError(
            f"Image height and width must be multiples of {what}. Received: input_shape={input_shape}, "
            f"patch_size={patch_size}"
        )
    return input_shape


def _known(d):
    return is_int(d) and d > 0


def _size_ok(d):
    return d is None or _known(d)


def _table_grid(position_embedding_grid, input_shape, cell):
    """Returns the (rows, cols) patch grid of the position-embedding tables."""
    grid = check_grid("position_embedding_grid", position_embedding_grid)
    fixed = tuple(d // cell for d in input_shape[:2] if d is not None)
    if grid is not None and len(fixed) == 2 and tuple(grid) != fixed:
        raise ValueError(
            f"`position_embedding_grid` of a fixed-size model must be its patch grid {fixed} (or None); another "
            f"table grid needs input_shape=(None, None, {input_shape[2]}), or keras_vit.resize. "
            f"Received: position_embedding_grid={position_embedding_grid!r}, input_shape={tuple(input_shape)}"
        )
    if grid is not None:
        return grid
    default = max(DEFAULT_INPUT_SHAPE[0] // cell, 1)
    return tuple(default if d is None else d // cell for d in input_shape[:2])
