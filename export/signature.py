"""The one float32 serving graph every format is converted from.

Input: float32 `(batch, height, width, channels)`, named `images`, in the
range the model takes (`export.input_range.model_input_range`: [-1, 1], the
`keras_vit.preprocess_input` scaling, for a plain keras_vit ViT; raw pixels
in [0, 255] for a model that scales them itself, e.g. built with
`include_preprocessing=True`), or named `pixels`, raw pixels in [0, 255],
when `include_preprocessing=True` asks the export to put the scaling into
the graph. Output `predictions`: float32 `(batch, classes)`: class
probabilities in [0, 1] by default (`scores="probabilities"`: a softmax,
summing to 1, is added in the graph when the model's head has no activation,
a sigmoid when that head has one logit (a binary classifier), so that apps
can threshold scores, e.g. MediaPipe's `score_threshold`), or the head's raw
logits (`scores="logits"`). A model without a Dense head (e.g.
`include_top=False`) or with another head activation keeps its outputs.

A model trained under a low-precision Keras dtype policy (`mixed_bfloat16`,
`mixed_float16`, `bfloat16`, `float16`) is exported as its *float32 twin*:
the same architecture rebuilt under the `float32` policy, holding the same
weights cast to float32. That is the computation the weights define; TFLite
and ONNX have no bfloat16 kernels for it (docs/traps.md), and it is what
every artifact is verified against.
"""

import os
import re
import tempfile
import zipfile

from keras_vit.common import files as _files
from keras_vit.common.validation import is_int
from export.input_range import PIXELS, READ, UNIT, model_input_range, parse_input_range, range_name, scale
from export.scores import apply_activation, score_kind
from export.sizes import (
    all_layers,
    default_image_size,
    image_shape,
    is_dynamic,
    model_image_shape,
    other_image_size,
    parse_image_size,
)

INPUT_NAME = "images"
PIXELS_INPUT_NAME = "pixels"  # the input of a graph that scales raw pixels itself (include_preprocessing=True)
OUTPUT_NAME = "predictions"
# Keras dtype policies whose compute (or variable) dtype is not float32; their float32 twin is exported.
LOW_PRECISION_POLICIES = ("mixed_bfloat16", "mixed_float16", "bfloat16", "float16")
_LOW_PRECISION_DTYPES = ("bfloat16", "float16")
_INT8_FRIENDLY_NORMS = ("LayerNormalization", "GroupNormalization")


def dtype_policy_name(model):
    """The Keras dtype policy a model was built (and so trained) under, e.g. "mixed_bfloat16".

    Keras keeps some layers in float32 under mixed precision (the input layer;
    keras_vit's head); the name returned is that of the other layers: the most
    common policy other than "float32", or "float32" if there is none.
    """
    names = [layer.dtype_policy.name for layer in all_layers(model) if hasattr(layer, "dtype_policy")]
    low = [n for n in names if n != "float32"]
    return max(set(low), key=low.count) if low else "float32"


def _to_float32_config(config):
    """A copy of a serialised model with every float dtype policy and tensor dtype set to float32."""
    if isinstance(config, list):
        return [_to_float32_config(c) for c in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and "config" in config:
        return "float32"
    if "class_name" in config and "DTypePolicy" in str(config.get("class_name")):
        name = config.get("config", {}).get("name", config["class_name"])
        raise ValueError(
            f"the model holds Keras-quantised layers (dtype policy {name!r}); export the float model and choose "
            "an export quantization (e.g. quantization='int8') instead"
        )
    if config.get("module") == "keras.layers" and config.get("class_name") in _INT8_FRIENDLY_NORMS:
        # Keras' norm layers leave a float NEG in int8 files (docs/traps.md); keras_vit's subclasses hold the same
        # variables and config and compute the same values without it. Files saved before keras_vit had them hold
        # Keras' class for `encoder_norm`.
        config = {**config, "module": "keras_vit.layers.normalization",
                  "registered_name": f"keras_vit>{config['class_name']}"}
    out = {}
    for key, value in config.items():
        if key == "dtype" and isinstance(value, str) and value in (*LOW_PRECISION_POLICIES, *_LOW_PRECISION_DTYPES):
            out[key] = "float32"
        else:
            out[key] = _to_float32_config(value)
    return out


def _has_keras_norms(model):
    """True if the model holds Keras' own LayerNormalization / GroupNormalization (not keras_vit's subclasses)."""
    import keras

    plain = (keras.layers.LayerNormalization, keras.layers.GroupNormalization)
    return any(type(layer) in plain for layer in all_layers(model))


def float32_twin(model):
    """Returns `model` itself if it computes in float32, else its float32 twin.

    A model that holds Keras' own `LayerNormalization` / `GroupNormalization`
    (a `.keras` file saved before keras_vit had its own, for `encoder_norm`)
    is rebuilt too, with keras_vit's layers in their place: the same
    variables and values, and no float NEG in an int8 file.

    The twin is rebuilt from the model's serialised config with every dtype
    policy set to "float32", and given the model's weights cast to float32
    (under mixed policies they already are float32; under pure "bfloat16" /
    "float16" they are rounded values, widened exactly).

    Raises:
        ValueError: the model holds Keras-quantised layers (`model.quantize`),
            which have no float32 twin, or its config cannot be deserialised
            (an unregistered custom layer).
    """
    import keras
    import numpy as np

    if dtype_policy_name(model) == "float32" and not _has_keras_norms(model):
        return model
    config = _to_float32_config(keras.saving.serialize_keras_object(model))
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        twin = keras.saving.deserialize_keras_object(config)
    except Exception as e:  # e.g. a custom layer Keras cannot find by name
        missing = re.search(r"Could not locate class '[^']+'", str(e))
        cause = missing.group(0) if missing else f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        raise ValueError(
            f"the model computes in {dtype_policy_name(model)!r} and its float32 twin cannot be rebuilt from its config "
            f"({cause}). Register custom layers with @keras.saving.register_keras_serializable, or build the model "
            "under the 'float32' policy"
        ) from None
    finally:
        keras.config.set_dtype_policy(previous)
    weights = model.get_weights()
    if len(weights) != len(twin.weights):
        raise ValueError(f"the float32 twin of {model.name!r} has {len(twin.weights)} weights, the model {len(weights)}")
    twin.set_weights([w.astype("float32") if w.dtype.kind == "f" or w.dtype.name == "bfloat16" else w for w in map(np.asarray, weights)])
    return twin


def serving_function(model, include_preprocessing=False, batch_size=None, activation=None, shape=None, input_range=UNIT):
    """Returns a `tf.function` images -> {"predictions": outputs} and its input signature.

    Args:
        model: a built float32 Keras model with one image input (see
            `float32_twin`).
        include_preprocessing: bool; True: the input, named `pixels`, is raw
            pixels in [0, 255], scaled to `input_range` in the graph.
        batch_size: None (dynamic batch) or a fixed int (1 for mobile
            TFLite files, see docs/traps.md: a dynamic batch splits XNNPACK
            partitions).
        activation: None, "softmax" or "sigmoid": what the graph applies to
            the model's outputs (see `score_kind`).
        shape: None (the model's fixed input size) or (height, width,
            channels) of the signature, height and width None for a dynamic
            size (a model of any resolution).
        input_range: `(lo, hi)`, the range the model takes
            (`export.input_range.model_input_range`), default [-1, 1].
    """
    import tensorflow as tf

    name = PIXELS_INPUT_NAME if include_preprocessing else INPUT_NAME
    spec = tf.TensorSpec((batch_size, *(shape or image_shape(model))), tf.float32, name=name)
    source = PIXELS if include_preprocessing else tuple(input_range)

    def graph(images):
        y = tf.cast(model(scale(images, source, input_range), training=False), tf.float32)
        if activation == "softmax":
            y = tf.nn.softmax(y, axis=-1)
        elif activation == "sigmoid":
            y = tf.math.sigmoid(y)
        return {OUTPUT_NAME: y}

    # the argument's name is the signature's input name (SavedModel keyword, ONNX and TFLite input)
    if include_preprocessing:
        serve = tf.function(lambda pixels: graph(pixels), input_signature=[spec])
    else:
        serve = tf.function(lambda images: graph(images), input_signature=[spec])
    return serve, spec


class ServingGraph:
    """One float32 serving graph of a model: traced once, written once as a SavedModel.

    Every export function converts this: `export_saved_model` copies its
    SavedModel, `export_tflite` converts it with
    `TFLiteConverter.from_saved_model`, `export_onnx` converts its
    `tf.function` with tf2onnx. `export_all` builds one and hands it to all.

    Attributes:
        source: the model given (any dtype policy).
        model: its float32 twin (`float32_twin`), what artifacts compute
            and are verified against.
        source_policy: the dtype policy `source` was built under.
        image_shape: (height, width, channels): the input size, or for a
            model of any resolution the export size (`image_size`, default
            `default_image_size`): the size of fixed-size files, calibration
            and the first verification.
        dynamic_size: bool; True: the signature leaves the height and width
            the model takes at any size unknown, `(batch, None, None, C)`.
        check_shapes: the (height, width, channels) sizes artifacts of this
            graph are verified at: `image_shape`, and with `dynamic_size`
            also `other_image_size`.
        classes: the output width (hidden_size for a token sequence).
        tokens: None, or for a model that outputs a token sequence (score
            kind "tokens") its length (None where the image size is free).
        class_names: the names the model's head carries
            (`keras_vit.layers.model_class_names`), or None.
        include_preprocessing: bool; True: the graph scales raw pixels in
            [0, 255] (input `pixels`) to the model's range.
        model_range: `(lo, hi)`, the range the model takes: `input_range`
            if given, else `export.input_range.model_input_range`;
            range_source: how it was known, in words.
        input_range: `(lo, hi)`, the range the graph's input takes: [0, 255]
            with `include_preprocessing`, else `model_range`.
        input_name: "pixels" with `include_preprocessing`, else "images".
        batch_size: None (dynamic batch) or 1.
        scores: "probabilities" or "logits", as asked.
        score_kind: what the graph outputs: "probabilities", "logits",
            "outputs", "features" or "tokens" (see `score_kind`); activation: what it added to the
            model's outputs ("softmax", "sigmoid" or None).
        function, input_spec: the serving `tf.function` and its signature.

    Use it as a context manager, or call `close()`, to delete its SavedModel.

    Args (beyond the attributes'): image_size: None or (height, width),
    the export size of a model of any resolution (see `parse_image_size`;
    a fixed-size model must be resized first, `keras_vit.resize`);
    dynamic_size: bool, default True: a model of any resolution keeps a
    dynamic height and width in the signature (SavedModel, ONNX); False
    fixes them at `image_size` (the TFLite files); input_range: None (read
    from the model) or a range of `export.input_range.RANGES`, refused where
    it contradicts what the model's first layers say.

    Raises:
        ValueError: a bad `input_range`; the model has no single image input of known channels,
            outputs neither one vector nor one token sequence per image,
            holds Keras-quantised layers, or its head cannot give `scores`;
            an `image_size` other than a fixed-size model's own.
    """

    def __init__(self, model, include_preprocessing=False, batch_size=None, scores="probabilities", image_size=None,
                 dynamic_size=True, input_range=None):
        from keras_vit.layers import model_class_names

        self._work = None  # first: `__del__` runs even when a check below raises
        # TensorFlow's float32 .tflite of this graph, made on first use (`export.tflite.convert`): the float32 file
        # and the float base of every LiteRT Quantizer mode of an export are one conversion, not one each
        self.float32_tflite = None
        given = parse_input_range(input_range)
        if len(model.output_shape) not in (2, 3) or not is_int(model.output_shape[-1]):
            raise ValueError(
                f"the model outputs {tuple(model.output_shape)}: export needs one vector per image, (batch, classes) "
                "or (batch, features), or a token sequence (batch, tokens, hidden_size) with hidden_size known"
            )
        size = parse_image_size(image_size, model) if image_size is not None else default_image_size(model)
        if size == "dynamic":
            raise ValueError("ServingGraph takes image_size=(height, width); ask for dynamic .tflite files with "
                             "dynamic_size=True")
        if not is_dynamic(model) and tuple(size) != model_image_shape(model)[:2]:
            raise ValueError(f"the model's input is fixed at {model_image_shape(model)[:2]}; resize it first "
                             f"(keras_vit.resize). Received: image_size={image_size!r}")
        shape = model_image_shape(model)
        self.image_shape = (*size, shape[2])
        self.dynamic_size = bool(dynamic_size) and is_dynamic(model)
        self.check_shapes = [self.image_shape]
        if self.dynamic_size:
            self.check_shapes.append((*other_image_size(model, size), shape[2]))
        self.source = model
        self.source_policy = dtype_policy_name(model)
        self.model = float32_twin(model)
        self.classes = int(self.model.output_shape[-1])
        self.tokens = self.model.output_shape[1] if len(self.model.output_shape) == 3 else None
        self.class_names = model_class_names(model)
        read, how = model_input_range(model)
        if given is not None and how.startswith(READ) and given != read:
            raise ValueError(f"input_range (--input-range) {range_name(given)} contradicts the model: its first layers "
                             f"take {range_name(read)} ({how}). Leave --input-range out, or give {range_name(read)}")
        if given is not None:
            self.model_range, self.range_source = given, "given (input_range / --input-range)"
        else:
            self.model_range, self.range_source = read, how
        self.include_preprocessing = bool(include_preprocessing)
        self.input_range = PIXELS if self.include_preprocessing else self.model_range
        self.input_name = PIXELS_INPUT_NAME if self.include_preprocessing else INPUT_NAME
        self.batch_size = batch_size
        self.scores = scores
        self.score_kind, self.activation = score_kind(self.model, scores)
        self.function, self.input_spec = serving_function(
            self.model, include_preprocessing, batch_size, self.activation,
            shape if self.dynamic_size else self.image_shape, self.model_range)

    def inputs(self, images):
        """Images in [-1, 1] (the exporter's own range) scaled to what the graph's input takes (`input_range`)."""
        return scale(images, UNIT, self.input_range)

    def saved_model_dir(self):
        """The SavedModel of the serving function (Keras' `ExportArchive`), written on first use.

        docs/traps.md: a `tf.Module` wrapper or `from_concrete_functions` loses
        the Keras 3 weights; `ExportArchive` tracks them. Signatures
        `serving_default` and `serve` are the same function.
        """
        import keras

        if self._work is None:
            work = _files.track(tempfile.mkdtemp(prefix="keras_vit_serving_"))  # removed by a SIGTERM too
            archive = keras.export.ExportArchive()
            archive.track(self.model)
            archive.add_endpoint("serving_default", self.function)
            archive.add_endpoint("serve", self.function)
            try:
                archive.write_out(os.path.join(work, "saved_model"), verbose=False)
            except BaseException:
                _files.remove(work)
                raise
            self._work = work
        return os.path.join(self._work, "saved_model")

    def predict(self, images, activation=True):
        """What the graph outputs for images in [-1, 1], float32 `(n, classes)`, computed by the float32 twin.

        The images are scaled to the model's range (`model_range`) first;
        the twin's outputs pass through the graph's float64 softmax or
        sigmoid where it adds one, unless `activation=False` (the model's
        own outputs).
        """
        import numpy as np

        x = scale(np.asarray(images, "float32"), UNIT, self.model_range).astype("float32")
        outputs = np.asarray(self.model.predict(x, verbose=0), dtype="float32")
        return apply_activation(outputs, self.activation) if activation else outputs

    def close(self):
        """Deletes the SavedModel written by `saved_model_dir`."""
        if self._work is not None:
            _files.remove(self._work)
            self._work = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()


def prepare(model, include_preprocessing=False, batch_size=None, scores=None, image_size=None, dynamic_size=None,
            input_range=None):
    """Returns `(graph, owned)`: a `ServingGraph` for these settings, and whether the caller must close it.

    `model` may be a Keras model or a `ServingGraph` (reused when its
    settings match, else rebuilt from its float32 model). `scores` None: the
    graph's own, or "probabilities" for a Keras model. `image_size` None
    and `dynamic_size` None: the graph's own (a Keras model of any
    resolution: its `default_image_size`, dynamic); see `ServingGraph`.
    `input_range` None: the graph's own (a Keras model: read from its layers).

    Raises:
        ValueError: see `ServingGraph`.
    """
    if isinstance(model, ServingGraph):
        scores = scores or model.scores
        size = tuple(image_size or model.image_shape[:2])
        dynamic = model.dynamic_size if dynamic_size is None else bool(dynamic_size) and is_dynamic(model.model)
        model_range = parse_input_range(input_range) or model.model_range
        if (model.include_preprocessing == bool(include_preprocessing) and model.batch_size == batch_size
                and model.scores == scores and tuple(model.image_shape[:2]) == size and model.dynamic_size == dynamic
                and model.model_range == model_range):
            return model, False
        graph = ServingGraph(model.model, include_preprocessing, batch_size, scores, size, dynamic, model_range)
        graph.source, graph.source_policy, graph.class_names = model.source, model.source_policy, model.class_names
        if model_range == model.model_range:
            graph.range_source = model.range_source
        return graph, True
    dynamic = True if dynamic_size is None else dynamic_size
    return ServingGraph(model, include_preprocessing, batch_size, scores or "probabilities", image_size, dynamic,
                        input_range), True


def contains_layer(model, cls):
    """True if `model` or any model nested in it has a layer of class `cls`."""
    return any(isinstance(layer, cls) for layer in all_layers(model))


def load_vit(path):
    """Loads a keras_vit `.keras` model file for export.

    Any model that holds keras_vit's `Patches` or `PatchEncoder` is
    accepted, nested ones too (e.g. `keras.Sequential([vit])`, or a model
    that resizes its input before a fixed-size ViT), as the Python API
    accepts them.

    Raises:
        ValueError: the file is missing, is not a Keras model file, holds a
            layer Keras cannot rebuild here (a custom layer whose module is
            not imported, a `Lambda`: the message says how to export it from
            Python), or a model without keras_vit's `Patches` or `PatchEncoder`
            layer (export any other Keras model from Python).
    """
    import keras

    import keras_vit  # noqa: F401  (registers the layers for deserialisation)
    from keras_vit.layers import PatchEncoder, Patches

    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder: give the model's .keras file (e.g. {os.path.join(path, 'model.keras')!r})")
    if not os.path.isfile(path):
        raise ValueError(f"model file not found: {path!r}")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path!r} is not a Keras .keras model file (a .keras file is a zip archive)")
    try:
        model = keras.saving.load_model(path)
    except Exception as e:  # any reason the file is not a loadable Keras model
        text = " ".join(str(e).split())
        if "Lambda" in text and "safe_mode" in text:
            raise ValueError(f"{path!r} holds a Lambda layer, which Keras loads only with safe_mode=False (it runs the "
                             "file's Python code): export it from Python, model = keras.saving.load_model(path, "
                             "safe_mode=False); export.export_all(model, ...)") from None
        if "could not be deserialized" in text or "Could not locate" in text:
            raise ValueError(f"{path!r} holds a layer of your own that Keras cannot rebuild here: export it from "
                             "Python after importing the module that registers it "
                             "(@keras.saving.register_keras_serializable): export.export_all(model, ...)") from None
        cut = text[:300].rsplit(" ", 1)[0] + " ..." if len(text) > 300 else text
        raise ValueError(f"{path!r} is not a loadable Keras model file ({type(e).__name__}: {cut})") from None
    if not contains_layer(model, PatchEncoder) and not contains_layer(model, Patches):
        raise ValueError(f"{path!r} holds a Keras model without keras_vit's Patches or PatchEncoder: not a keras_vit "
                         "ViT (export.export_all(model, ...) exports any other Keras image model from Python)")
    model_image_shape(model)
    return model
