"""`keras-vit-train --init-from MODEL.keras`: a saved keras_vit model made ready to fine-tune (paper Sec. 3.2).

Loaded uncompiled, resized with `keras_vit.resize` when `--image-size` asks
for another resolution (the position embeddings resampled once), rebuilt
under the `--precision` dtype policy, and given a zero-initialised head when
the saved one does not have the data's class count. Every change is printed
in one line. Errors are ValueErrors that name the flag, so the CLI exits 2.
"""

import zipfile

from keras_vit.common.validation import check_image_size


def load_saved_model(path):
    """Loads a keras_vit model from a .keras file (uncompiled); ValueError naming the file otherwise."""
    import keras

    import keras_vit  # noqa: F401 (registers keras_vit's layers and optimizers)
    from keras_vit.layers import PatchEncoder

    if not zipfile.is_zipfile(path):
        raise ValueError(f"--init-from {path!r} is not a Keras .keras model file (a .keras file is a zip archive)")
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as e:  # not a zip, not a Keras model, an unknown layer
        raise ValueError(
            f"--init-from {path!r} could not be loaded as a Keras model: {type(e).__name__}: {str(e)[:300]}"
        ) from None
    encoder = {layer.name: layer for layer in getattr(model, "layers", [])}.get("patch_encoder")
    if not isinstance(model, keras.Model) or not isinstance(encoder, PatchEncoder):
        nested = any(isinstance(layer, keras.Model) and "patch_encoder" in {sub.name for sub in layer.layers}
                     for layer in getattr(model, "layers", []))
        raise ValueError(
            f"--init-from {path!r} is not a keras_vit Vision Transformer (no 'patch_encoder' layer"
            + (f"; it holds one nested inside {model.name!r}: save the ViT itself)" if nested else ")")
        )
    return model


def saved_image_size(model, image_size, path):
    """The training image size: --image-size, else the saved model's (its table grid's for any resolution)."""
    from keras_vit.models.resnet import output_stride
    from keras_vit.weights.loader import cell_size, resnet_num_layers

    _, height, width, channels = model.input_shape
    if channels != 3:
        raise ValueError(f"--init-from {path!r} takes {channels}-channel images; keras-vit-train's data are RGB (3)")
    stages = resnet_num_layers(model)
    cell = cell_size(model)
    if image_size is not None:
        stride = f" ({cell // output_stride(stages)}) x the ResNet's stride ({output_stride(stages)})" if stages else ""
        return check_image_size(image_size, cell, f"the patch size{stride} of --init-from {path}")
    rows, cols = model.get_layer("patch_encoder").grid_size or (None, None)
    if height is None or width is None:
        height = rows * cell if height is None else height
        width = cols * cell if width is None else width
        print(f"--init-from: {model.name} takes any resolution; training at {height}x{width} px, its position "
              f"table's grid ({rows}x{cols} patches of {cell} px; --image-size sets another)")
    return height, width


def fine_tuning_model(model, image_size, classes, precision):
    """The saved model at `image_size`, in `precision`, with a head of `classes` (paper Sec. 3.2)."""
    import keras

    import keras_vit
    from keras_vit.layers import ClassifierHead, DistilledHead, SequencePooling

    size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    shape = tuple(model.input_shape[1:3])
    encoder = model.get_layer("patch_encoder")
    if None not in shape and shape != size:
        model = keras_vit.resize(model, (*size, 3))
        kind = encoder.position_embedding_kind
        how = f"resampled once ({encoder.interpolation})" if kind.startswith("learned") else "need no resampling"
        print(f"--init-from: {model.name} resized from {shape[0]}x{shape[1]} to {size[0]}x{size[1]} px "
              f"(keras_vit.resize); its {kind} position embeddings {how}")
    model = with_policy(model, precision)
    layers = {layer.name: layer for layer in model.layers}
    head = layers.get("predictions")
    if head is not None and getattr(head, "units", None) == classes:
        return model
    if "pooling" in layers:
        features = layers["pooling"].output
    else:  # a backbone: pool as a classifier of its kind would
        class_token, distilled = layers["patch_encoder"].class_token, layers["patch_encoder"].distillation_token
        mode = "tokens" if distilled else "token" if class_token else "avg"
        features = SequencePooling(mode, class_token=class_token, distillation_token=distilled, name="pooling")(
            model.outputs[0])
    activation = None if head is None else head.activation
    # DeiT's two tokens (pooling "tokens"): a new pair of zero-initialised heads, averaged
    outputs = (DistilledHead if len(features.shape) == 3 else ClassifierHead)(
        classes, kernel_initializer="zeros", activation=activation, dtype="float32", name="predictions"
    )(features)
    print(f"--init-from: new zero-initialised head of {classes} classes "
          + ("(the model had none" if head is None else f"(the saved head has {getattr(head, 'units', '?')}")
          + ("; pre_logits dropped)" if "pre_logits" in layers else ")"))
    return keras.Model(model.inputs, outputs, name=model.name)


def with_policy(model, precision):
    """The model with every layer but the float32 head computing under the `precision` dtype policy."""
    import keras

    def wanted(name):
        return "float32" if name == "predictions" else precision

    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    if all(layer.dtype_policy.name == wanted(layer.name) for layer in layers):
        return model
    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] != "InputLayer":
            layer["config"]["dtype"] = wanted(layer["name"])
    rebuilt = keras.Model.from_config(config)
    rebuilt.set_weights(model.get_weights())
    print(f"--init-from: {model.name} computes under the {precision} dtype policy (--precision)")
    return rebuilt
