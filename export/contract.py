"""What an app receives from an export: each file's input and output, its class names, and the check that the
model was fed images in the range it takes.

`artifact_contract` reads a written file (TFLite, ONNX, SavedModel) back and
says what an app feeds it and gets: the input's name, dtype, shape, whether
the batch is fixed, the value range, the app's preprocessing, and the
output's kind and dtype. `label_names` chooses the class names the files
carry. `check_keras_accuracy` stops an export whose model is fed images in
the wrong range (issue: a model that takes raw pixels, fed [-1, 1], is at
chance and so are its files, which then all agree with it).
"""

import math
import os

import numpy as np

from keras_vit.layers.classifier_head import check_class_names
from export.input_range import PIXELS, RANGES, UNIT, describe, scale
from export.metadata import app_preprocessing
from export.scores import CLASSLESS
from export.verify import VerificationError


def artifact_contract(path, fmt, graph):
    """What an app feeds a written artifact and gets back, read from the file itself.

    Args:
        path: the artifact's file (or SavedModel folder).
        fmt: "tflite", "onnx" or "saved_model".
        graph: the `export.signature.ServingGraph` it was made from (the
            value range and score kind, which a file does not hold).

    Returns:
        A dict: `input` {name, dtype, shape (None where dynamic), batch
        ("fixed at 1" or "dynamic"), range ([lo, hi] of the float values;
        for a uint8 / int8 input the raw pixels' [0, 255]), quantization
        ([scale, zero_point] of an integer input)}, `output` {name, dtype,
        kind ("probabilities", "logits", "outputs", "features" or "tokens"),
        for "tokens" its shape `[batch, tokens, hidden_size]`, for
        "features" `[batch, hidden_size]`}, and
        `app_preprocessing`: what the app does to RGB pixels p in [0, 255].
    """
    name, dtype, shape, quantization = _read_input(path, fmt)
    out_name, out_dtype, out_quantization = _read_output(path, fmt)
    float_range = list(graph.input_range)
    contract = {
        "input": {"name": name, "dtype": dtype, "shape": shape,
                  "batch": "dynamic" if shape and shape[0] is None else "fixed at 1",
                  "range": float_range if dtype == "float32" else list(PIXELS) if dtype == "uint8" else [-128, 127]},
        "output": {"name": out_name, "dtype": out_dtype, "kind": graph.score_kind},
        "app_preprocessing": app_preprocessing(graph.input_range, dtype),
    }
    if graph.score_kind == "tokens":
        contract["output"]["shape"] = [shape[0] if shape else None, graph.tokens, graph.classes]  # the file's batch
        contract["output"]["layout"] = "the class token first (if the model has one), then one token per patch, row by row"
    elif graph.score_kind == "features":
        contract["output"]["shape"] = [shape[0] if shape else None, graph.classes]
        contract["output"]["layout"] = "one feature vector an image (hidden_size values), no classes"
    if quantization is not None:
        contract["input"]["quantization"] = quantization
    if out_quantization is not None:  # an integer output: how the app reads scores from it
        out_scale, out_zero = out_quantization
        contract["output"]["quantization"] = out_quantization
        contract["output"]["dequantize"] = f"score = (q - {out_zero}) * {out_scale:.6g}"
    return contract


def _read_input(path, fmt):
    """`(name, dtype, shape, quantization)` of a file's one input; shape has None where it is dynamic."""
    if fmt == "tflite":
        details = _tflite_details(path)[0]
        signature = details.get("shape_signature", details["shape"])
        shape = [None if int(d) < 0 else int(d) for d in signature]
        scale_, zero = details["quantization"]
        dtype = np.dtype(details["dtype"]).name
        return details["name"], dtype, shape, None if dtype == "float32" else [float(scale_), int(zero)]
    if fmt == "onnx":
        import onnx

        model = onnx.load(path, load_external_data=False)
        value = model.graph.input[0]
        dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name
        return value.name, dtype, dims, None
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name, spec), = serve.structured_input_signature[1].items()
    return name, spec.dtype.name, [None if d is None else int(d) for d in spec.shape], None


def _read_output(path, fmt):
    """`(name, dtype, quantization)` of a file's one output; quantization `[scale, zero_point]` of an integer one."""
    if fmt == "tflite":
        details = _tflite_details(path)[1]
        dtype = np.dtype(details["dtype"]).name
        scale_, zero = details["quantization"]
        return details["name"], dtype, None if dtype.startswith("float") else [float(scale_), int(zero)]
    if fmt == "onnx":
        import onnx

        value = onnx.load(path, load_external_data=False).graph.output[0]
        return value.name, onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type).name, None
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    (name, spec), = serve.structured_outputs.items()
    return name, spec.dtype.name, None


def _tflite_details(path):
    """`(input details, output details)` of a .tflite file's first input and output (LiteRT)."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    return interpreter.get_input_details()[0], interpreter.get_output_details()[0]


def format_contracts(report):
    """The report's contracts as a Markdown table: what an app feeds each file and gets back."""
    rows = ["| artifact | input (dtype, shape) | batch | values | the app's preprocessing of pixels p | output |",
            "|" + "---|" * 6]
    for r in report["artifacts"]:
        c = r.get("contract")
        if not c:
            continue
        i, o = c["input"], c["output"]
        shape = "x".join("?" if d is None else str(d) for d in i["shape"])
        values = f"[{i['range'][0]:g}, {i['range'][1]:g}]"
        out = f"`{o['name']}` {o['dtype']} {o['kind']}"
        if "shape" in o:
            out += " " + "x".join("?" if d is None else str(d) for d in o["shape"])
        out += f" ({o['dequantize']})" if "dequantize" in o else ""
        rows.append(f"| {r['name']} | `{i['name']}` {i['dtype']} {shape} | {i['batch']} | {values} | "
                    f"{c['app_preprocessing']} | {out} |")
    return "\n".join(rows)


def label_names(labels, class_names, classes, model_names=None, data_name=None):
    """`(names, source)`: the labels the files carry, and where they came from.

    `data_name`: the calibration data as given (`--calibration-data`), named in the messages about its classes.

    `source` is "given" (`labels`), "model" (the head's class names),
    "data" (the calibration data set's) or "numbers" ("0".."n-1"). A
    one-output (binary) model and a two-class data set: its one label is
    the data set's second class (label 1, what the output's probability is of).

    Raises:
        ValueError: a count other than `classes`; a missing labels file; a
            calibration data set whose class names differ from the model's
            own (its labels would not mean the model's classes); `labels`
            that name the model's own classes or the calibration data's in
            another order (the files would name the wrong class). `labels`
            with other names than the model's own are taken, printed as a
            warning, and `source` says so (the report's `labels_source`).
    """
    data = "the calibration data set" if data_name is None else f"calibration_data={str(data_name)!r} (--calibration-data)"
    if classes == 1 and class_names is not None and len(class_names) == 2:
        class_names = list(class_names[1:])  # a binary classifier's one output: label 1 of a two-class folder
    if labels is None:
        if class_names is not None and len(class_names) != classes:
            if model_names is None:  # labels naming all the model's classes number a folder that lacks some
                advice = "export with data of the model's own classes, or pass labels that name all of them"
            else:  # the model's own names already do that: --labels cannot help
                foreign = [str(name) for name in class_names if str(name) not in map(str, model_names)]
                advice = (f"{', '.join(map(repr, foreign[:5]))}{', ...' if len(foreign) > 5 else ''} "
                          f"{'are' if len(foreign) > 1 else 'is'} not among the model's own classes "
                          f"({', '.join(map(str, model_names[:5]))}{', ...' if len(model_names) > 5 else ''}); "
                          "export with a folder of the model's classes (one sub-folder each, named as in training)")
            raise ValueError(
                f"the model has {_classes(classes)} but {data} has {len(class_names)} "
                f"({', '.join(class_names[:5])}{', ...' if len(class_names) > 5 else ''}); {advice}"
            )
        if model_names is not None and class_names is not None and list(class_names) != list(model_names):
            raise ValueError(
                f"the classes ({', '.join(class_names[:5])}{', ...' if len(class_names) > 5 else ''}) of {data} "
                f"are not the model's own ({', '.join(model_names[:5])}{', ...' if len(model_names) > 5 else ''}), in "
                "that order: its labels would not mean the model's classes, and labels (--labels) would not change "
                "that. Export with a folder of the model's classes (one sub-folder each, named as in training)"
            )
        if model_names is not None:
            return list(model_names), "model"
        if class_names:
            return list(class_names), "data"
        return [str(i) for i in range(classes)], "numbers"
    if isinstance(labels, (str, os.PathLike)):
        labels = read_labels_file(labels)
    labels = list(labels)
    if len(labels) != classes:
        raise ValueError(f"labels (--labels) must name each of the model's {_classes(classes)}. Received: {len(labels)} "
                         f"labels ({', '.join(map(str, labels[:5]))}{', ...' if len(labels) > 5 else ''})")
    labels = check_class_names(labels, classes, "labels (--labels)")
    foreign = [] if model_names is None or class_names is None else [
        str(name) for name in class_names if str(name) not in map(str, model_names)]
    if foreign:  # the folder's classes must be the model's, whatever names the files are to carry
        raise ValueError(
            f"the classes {', '.join(map(repr, foreign[:5]))} of {data} are not among the model's own "
            f"({', '.join(map(str, model_names[:5]))}{', ...' if len(model_names) > 5 else ''}): its labels would not "
            "mean the model's classes, whatever --labels names them. Export with a folder of the model's classes")
    for other, what in ((model_names, "the model's own class names"), (class_names, "the calibration data's classes")):
        if other is not None and list(other) != labels and sorted(map(str, other)) == sorted(labels):
            moved = [f"line {i + 1} names {name!r} where {what} have {str(theirs)!r}"
                     for i, (name, theirs) in enumerate(zip(labels, other)) if name != str(theirs)]
            raise ValueError(
                f"labels (--labels) name {what} in another order: {'; '.join(moved[:3])}"
                f"{'; ...' if len(moved) > 3 else ''}. The files would name the wrong class for these outputs; put the "
                f"lines in the model's order{', or leave out --labels (the model carries its names)' if other is model_names else ''}"
            )
    if model_names is not None and list(model_names) != labels:
        differ = [f"{name!r} for {str(theirs)!r}" for name, theirs in zip(labels, model_names) if name != str(theirs)]
        note = (f"given, not the model's own names ({len(differ)} differ: {', '.join(differ[:3])}"
                f"{', ...' if len(differ) > 3 else ''})")
        print(f"warning: labels (--labels) are {note}; the files carry the given names", flush=True)
        return labels, note
    return labels, "given"


def _classes(n):
    return "1 class" if n == 1 else f"{n} classes"


def read_labels_file(path):
    """The class names of a labels file: one per line, UTF-8 (a byte-order mark is dropped), trailing blank lines ignored.

    Raises:
        ValueError: no such file, or a blank line between names (it would
            shift every name after it); names `labels (--labels)`.
    """
    if not os.path.isfile(path):
        raise ValueError(f"labels file not found: {str(path)!r} (labels / --labels)")
    with open(path, encoding="utf-8-sig") as f:
        lines = [line.strip() for line in f.read().splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    if "" in lines:
        raise ValueError(f"labels (--labels) {str(path)!r} has a blank line at line {lines.index('') + 1}, between "
                         "class names: every name after it would name the wrong output. Remove it")
    return lines


def _beyond_guessing(correct, n, chance):
    """True when `correct` of `n` right is beyond a guess of accuracy `chance` at three standard deviations' level:
    the one-sided binomial tail P(X >= correct) is at most 0.00135."""
    tail = sum(math.comb(n, k) * chance ** k * (1 - chance) ** (n - k) for k in range(correct, n + 1))
    return tail <= 0.00135


def check_keras_accuracy(graph, images, labels):
    """Checks that the Keras model itself decides the labelled verification images; returns warnings (a list).

    A model fed images in the wrong range (one that takes raw pixels, given
    [-1, 1]) is near chance, and so are its files: every file then agrees
    with a model that is wrong, and passes. When the model's accuracy on
    the images is near chance (not beyond a guess's at three standard
    deviations' level by the binomial tail, `_beyond_guessing`, or less than
    5 points above it), it is measured again with the images in each other
    range of `export.input_range.RANGES`. Too few images to tell any model
    from a guess (4 of 3 classes: a guess gets all 4 right 1.2% of the
    time) give a warning that says so.

    Args:
        graph: the `export.signature.ServingGraph`.
        images: float32 `(n, h, w, c)` in [-1, 1]; labels: int `(n,)` or None.

    Returns:
        [] when the model is fine or there are no labels; else one warning
        (also printed): the model is near chance under every range.

    Raises:
        VerificationError: another range makes the model accurate (at least
            20 points above chance and the range read); names it, and
            `--input-range` / `input_range`.
    """
    if labels is None or len(labels) == 0 or graph.score_kind in ("outputs", *CLASSLESS):
        return []
    from export.scores import decision_scores
    labels = np.asarray(labels).reshape(-1)
    chance, n = 1.0 / max(graph.classes, 2), len(labels)
    above = lambda a: a >= chance + 0.05 and _beyond_guessing(round(a * n), n, chance)  # noqa: E731
    raw = "logits" if graph.activation or graph.score_kind == "logits" else graph.score_kind  # what predict gives
    decide = lambda x: decision_scores(graph.predict(x, activation=False), raw).argmax(-1)  # noqa: E731
    accuracy = float((decide(images) == labels).mean())
    if above(accuracy):
        return []
    if not _beyond_guessing(n, n, chance):  # even every image right could be a guess's luck
        warning = (f"WARNING: {n} labelled verification image{'s' if n > 1 else ''} cannot tell the Keras model from "
                   f"a guess (it is {accuracy:.1%} accurate, chance {chance:.1%}): verify on more images (a larger "
                   "--calibration-data folder)")
        print(warning, flush=True)
        return [warning]
    tried = {}
    for name, other in RANGES.items():
        if other != tuple(graph.model_range):
            x = scale(scale(images, UNIT, other), graph.model_range, UNIT)  # the model fed `other`
            tried[name] = float((decide(x) == labels).mean())
    best = max(tried, key=tried.get)
    fed = f"fed images in {describe(graph.model_range)} ({graph.range_source})"
    if above(tried[best]) and tried[best] >= max(chance + 0.2, accuracy + 0.2):
        raise VerificationError(
            f"the Keras model itself is only {accuracy:.1%} accurate on the {len(labels)} labelled verification images "
            f"(chance {chance:.1%}) {fed}, and {tried[best]:.1%} fed {describe(RANGES[best])}: it takes that range. "
            f"Export with --input-range {best} (input_range={best!r}); nothing was written"
        )
    warning = (f"WARNING: the Keras model itself is only {accuracy:.1%} accurate on the {len(labels)} labelled "
               f"verification images (chance {chance:.1%}) {fed}, and no other input range does better "
               f"({', '.join(f'{k}: {v:.1%}' for k, v in tried.items())}). Every file is compared with these "
               "decisions: check that the model is trained, that the images' classes are its own, in its order, "
               "and the range it takes (--input-range)")
    print(warning, flush=True)
    return [warning]


