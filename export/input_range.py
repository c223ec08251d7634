"""The pixel range a model takes, read from its first layers, and the scaling between ranges.

A keras_vit ViT takes images scaled to [-1, 1] (`keras_vit.preprocess_input`,
the published checkpoints' convention). A model that scales its own input
takes raw pixels instead: built with `include_preprocessing=True` (a first
`Rescaling(1 / 127.5, offset=-1)`), or the `keras.applications` habit of
`x = keras_vit.preprocess_input(inputs)`, a `keras.layers.Rescaling` or a
`keras.layers.Normalization` before the ViT. `model_input_range` reads that
from the model's first layers, so the exporter feeds calibration and
verification images, and tells the app (TFLite metadata, report), in the
range the model was trained on.

Inside the exporter every image is held in [-1, 1] (what the data pipelines
of `keras_vit.data` give) and scaled with `scale` where a model or an artifact
takes another range.
"""

import math

import numpy as np

# The ranges a model or an artifact can take, by the name `--input-range` uses.
RANGES = {"-1,1": (-1.0, 1.0), "0,1": (0.0, 1.0), "0,255": (0.0, 255.0)}
UNIT = RANGES["-1,1"]  # keras_vit's own range (keras_vit.preprocess_input), the exporter's images
PIXELS = RANGES["0,255"]  # raw 8-bit pixels, what cameras and image files give
# Layers that keep pixel values as they are at inference (augmentation is off; resizing and cropping keep the range).
_VALUE_PRESERVING = ("Resizing", "CenterCrop", "Cropping2D", "ZeroPadding2D", "Identity", "Dropout")
_MODELS = ("Functional", "Sequential", "Model")
READ = "read from its first layers"
UNREAD = "not known:"


def range_name(value):
    """`(lo, hi)` as the text `--input-range` takes and reports print, e.g. "0,255"."""
    return ",".join(f"{v:g}" for v in value)


def describe(value):
    """`(lo, hi)` in words, e.g. "[0, 255] (raw pixels)"."""
    words = {UNIT: " (keras_vit.preprocess_input's scaling)", PIXELS: " (raw pixels)", RANGES["0,1"]: " (pixels / 255)"}
    return f"[{value[0]:g}, {value[1]:g}]{words.get(tuple(value), '')}"


def parse_input_range(value, argument="input_range"):
    """Checks an input range: None (read it from the model), "-1,1", "0,1", "0,255" or a `(lo, hi)` pair of these.

    Raises:
        ValueError: anything else; names `argument` and the choices.
    """
    if value is None:
        return None
    original = value
    if isinstance(value, str):
        key = value.replace(" ", "").replace("[", "").replace("]", "").replace(":", ",")
        if key in RANGES:
            return RANGES[key]
        value = key.split(",")  # "0.0,255.0"
    if isinstance(value, (tuple, list)) and len(value) == 2:
        try:
            pair = (float(value[0]), float(value[1]))
        except (TypeError, ValueError):
            pair = None
        if pair in RANGES.values():
            return pair
    raise ValueError(f"{argument} must be one of {', '.join(RANGES)} (the pixel range the model takes: 0,255 for a "
                     f"model that scales raw pixels itself). Received: "
                     + (f"{argument} {original}" if argument.startswith("--") else f"{argument}={original!r}"))


def scale(images, source, target):
    """`images` mapped affinely from range `source` to range `target` (NumPy arrays and tensors alike).

    Written so that [-1, 1] <-> [0, 255] is exactly `(x + 1) * 127.5` and
    `x / 127.5 - 1`, the scaling of `keras_vit.preprocess_input`.
    """
    source, target = tuple(source), tuple(target)
    if source == target:
        return images
    x = images - source[0] if source[0] else images
    ratio = (target[1] - target[0]) / (source[1] - source[0])
    x = x * ratio if ratio >= 1 else x / ((source[1] - source[0]) / (target[1] - target[0]))
    return x + target[0] if target[0] else x


def check_images_range(images, expected, argument="representative_data"):
    """Refuses calibration images that are plainly in another pixel range than the file's input takes.

    The two mistakes people make: raw pixels in [0, 255] for a model that
    takes [-1, 1] (or [0, 1]), and images already scaled to [-1, 1] or
    [0, 1] for a model that takes raw pixels. Either calibrates every int8
    range on values the file never sees, and verification only says so
    later as a failed agreement bar. The test is coarse on purpose, so that
    noise or augmented images within a model's range pass:
    - expected [-1, 1] or [0, 1]: refused when any value is above 5 (pixel scale);
    - expected [0, 255]: refused when every value lies within [-1.5, 1.5].

    Args:
        images: float array `(n, height, width, channels)`, the calibration images as given.
        expected: the `(lo, hi)` range the artifact's input takes, one of `RANGES`.
        argument: the argument's name for the message.

    Raises:
        ValueError: the images look like another range; names `argument`, the expected range and what was seen.
    """
    expected = tuple(expected)
    lo, hi = float(np.min(images)), float(np.max(images))
    if expected[1] <= 1.0 and hi > 5.0:
        looks = "raw pixels in [0, 255]"
    elif expected == PIXELS and lo >= -1.5 and hi <= 1.5:
        looks = "images already scaled to [-1, 1] or [0, 1]"
    else:
        return
    how = ("keras_vit.preprocess_input scales raw pixels to it" if expected == UNIT else
           "the raw 8-bit pixel values, unscaled" if expected == PIXELS else "pixels / 255")
    raise ValueError(
        f"{argument}: the calibration images hold values in [{lo:g}, {hi:g}] ({looks}), and the file takes "
        f"{describe(expected)}. Give images in [{expected[0]:g}, {expected[1]:g}] ({how}), or an image folder or "
        "'digits', which the exporter scales itself; if the model takes another range than was read from it, pass "
        "input_range= (--input-range)")


def model_input_range(model):
    """The pixel range a model takes, read from its first layers, and how it was read.

    Follows the model's graph from its image input through the layers that
    scale pixels, into nested models (e.g. `keras.Sequential([Rescaling,
    vit])`, or a keras_vit ViT built with `include_preprocessing=True`),
    until the first layer that is not one of them (keras_vit's `Patches`,
    `ImageSizeCheck`, the hybrid's stem):
    `keras.layers.Rescaling`, `keras.layers.Normalization` (its adapted mean
    and variance), the `keras.ops` arithmetic with constants that
    `keras_vit.preprocess_input` and `keras.applications`' preprocessing
    put into a functional model (divide, multiply, add, subtract), and
    layers that keep values (augmentation, resizing, cropping). Their
    composition is an affine map `x -> a x + b`. Without any, the model
    takes keras_vit's [-1, 1]. Else it takes the range of `RANGES` from
    which that map reaches a spread closest to [-1, 1]'s (width 2, on a log
    scale): x / 127.5 - 1 and x / 255 both mean [0, 255]; `Normalization`
    adapted on pixels in [0, 255] (mean ~120, std ~60) too, adapted on
    [0, 1] images [0, 1].

    A subclassed model, or a first layer that is none of those (a `Lambda`,
    a custom layer) ends the walk, and the range is not known. Pass the
    range to the exporter (`input_range=`, `--input-range`) where it cannot
    be read; `export_all` also checks the model's accuracy on labelled
    verification images, which catches a wrong range.

    Args:
        model: a Keras model with one image input.

    Returns:
        `(range, how)`: `range` a `(lo, hi)` tuple of `RANGES`; `how` a
        short text naming the layers read, for messages and the report: it
        starts with `READ` when the range was read from layers, with
        `UNREAD` when a layer that is neither one of those nor keras_vit's
        own (a custom layer, a `Lambda`) comes first and the range is a
        guess.
    """
    found, stopped = [], []
    a, b = _walk(model, 1.0, 0.0, found, stopped)
    if stopped:  # a layer of the user's own before the ViT: what it does to pixels is not known
        name, kind = stopped[0]
        read = f" after {', '.join(found)}" if found else ""
        return UNIT, (f"{UNREAD} its layer {name!r} ({kind}){read} cannot be read: taken to take keras_vit's "
                      "[-1, 1]; pass --input-range (input_range=) if it takes another range")
    if not found:
        return UNIT, "no pixel-scaling layer before the ViT (keras_vit's own range)"
    best = min(RANGES.values(), key=lambda r: abs(math.log(max(abs(a) * (r[1] - r[0]), 1e-12) / 2.0)))
    return best, f"{READ} ({', '.join(found)}: x -> {a:.6g} x + {b:.6g})"


def _walk(model, a, b, found, stopped):
    """Composes the pixel-scaling layers at the start of `model` onto `x -> a x + b`; appends their names to `found`,
    and `(name, class)` of a first layer of the user's own (not keras_vit's) that ends the walk to `stopped`."""
    try:
        config = model.get_config()
    except Exception:  # a subclassed model: nothing to read
        stopped.append((model.name, type(model).__name__))
        return a, b
    if not isinstance(config, dict) or not isinstance(config.get("layers"), list):
        return a, b
    layers = config["layers"]
    if "input_layers" in config:  # functional: follow the single consumer of the current tensor
        inputs = config["input_layers"]
        if len(inputs) != 1 and not (len(inputs) == 3 and isinstance(inputs[0], str)):
            return a, b
        current = inputs[0] if isinstance(inputs[0], str) else inputs[0][0]
        chain = []
        while True:
            consumers = [entry for entry in layers if _reads(entry, current)]
            if len(consumers) != 1:
                break
            chain.append(consumers[0])
            current = consumers[0]["name"]
            if consumers[0]["class_name"] in _MODELS:
                break
    else:  # Sequential: the list is the chain
        chain = [entry for entry in layers if entry.get("class_name") != "InputLayer"]
    for entry in chain:
        step = _affine(model, entry, found)
        if step is None:
            if not _is_keras_vit(entry):
                stopped.append((entry.get("name") or entry.get("config", {}).get("name"), entry.get("class_name")))
            break
        if step == "nested":
            return _walk(_layer(model, entry), a, b, found, stopped)
        s, o = step
        a, b = s * a, s * b + o
    return a, b


def _is_keras_vit(entry):
    """True for a serialised layer of keras_vit's own (`Patches`, `ImageSizeCheck`, the hybrid's `StdConv2D`, ...)."""
    return str(entry.get("registered_name", "")).startswith("keras_vit>") or str(entry.get("module", "")).startswith(
        "keras_vit")


def _reads(entry, name):
    """True if a serialised functional layer's first node reads the output of layer `name`."""
    nodes = entry.get("inbound_nodes") or []
    if not nodes:
        return False
    args = nodes[0].get("args", []) if isinstance(nodes[0], dict) else []
    return any(isinstance(arg, dict) and arg.get("class_name") == "__keras_tensor__"
               and arg["config"]["keras_history"][0] == name for arg in args)


def _layer(model, entry):
    name = entry.get("name") or entry.get("config", {}).get("name")
    return model.get_layer(name)


def _constant(entry):
    """`(value, tensor_first)` of a two-argument op with one plain number, or None."""
    nodes = entry.get("inbound_nodes") or [{}]
    args = nodes[0].get("args", []) if isinstance(nodes[0], dict) else []
    if len(args) != 2:
        return None
    numbers = [arg for arg in args if isinstance(arg, (int, float)) and not isinstance(arg, bool)]
    if len(numbers) != 1:
        return None
    return float(numbers[0]), not isinstance(args[0], (int, float))


def _affine(model, entry, found):
    """`(scale, offset)` of one serialised layer or op, "nested" for a model, or None where the walk ends."""
    import numpy as np

    kind = entry.get("class_name")
    name = entry.get("name") or entry.get("config", {}).get("name")
    if kind in _MODELS or (kind not in ("Rescaling", "Normalization") and hasattr(_safe_layer(model, name), "layers")):
        return "nested"
    if kind == "Rescaling":
        layer = _layer(model, entry)
        s, o = np.mean(np.asarray(layer.scale, "float64")), np.mean(np.asarray(layer.offset, "float64"))
        found.append(f"{name} (Rescaling)")
        return float(s), float(o)
    if kind == "Normalization":
        layer = _layer(model, entry)
        mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)
        if mean is None or variance is None:
            return None
        mean = np.asarray(mean, "float64").reshape(-1)
        std = np.sqrt(np.maximum(np.asarray(variance, "float64").reshape(-1), 1e-12))
        found.append(f"{name} (Normalization)")
        if getattr(layer, "invert", False):
            return float(std.mean()), float(mean.mean())
        return float((1 / std).mean()), float((-mean / std).mean())
    if kind in ("TrueDivide", "Divide", "Multiply", "Add", "Subtract"):
        constant = _constant(entry)
        if constant is None:
            return None
        c, tensor_first = constant
        if kind in ("TrueDivide", "Divide"):
            if not tensor_first or c == 0:
                return None
            step = (1 / c, 0.0)
        elif kind == "Multiply":
            step = (c, 0.0)
        elif kind == "Add":
            step = (1.0, c)
        else:
            step = (1.0, -c) if tensor_first else (-1.0, c)
        sign = {"TrueDivide": "/", "Divide": "/", "Multiply": "*", "Add": "+", "Subtract": "-"}[kind]
        found.append(f"{name} (x {sign} {c:g})" if tensor_first else f"{name} ({c:g} {sign} x)")
        return step
    if kind in _VALUE_PRESERVING or (isinstance(kind, str) and kind.startswith("Random")):
        return 1.0, 0.0
    return None


def _safe_layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:  # an op: not a layer
        return None
