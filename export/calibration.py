"""Calibration that can be trusted (issue 45): a manifest beside every calibrated file, and a stability check.

A calibrated file (int8, int16x8, int8_mixed16, full_integer_int8, ONNX int8: `export.modes.Mode.calibrated`) holds
activation ranges measured on the calibration images. Two questions decide whether it can be trusted, and
`keras-vit-export` answers both for every such file:

- Which images? `manifest` records their count, where they came from, how they were preprocessed (size, the input
  range they were scaled to) and a SHA-256 of the images as calibrated (float32 pixels, in order), written as
  `<file>.calibration.json` beside the file (`export.output_folder.manifest_file`), so that a file can be traced
  to its images and a second export compared with the first.
- Would other images have given the same file? `stability` makes the file twice more, from two disjoint halves of
  the images (even and odd positions, so that both halves span a folder read class by class), and compares the
  two on the verification images: they must agree within the mode's own agreement bar (cosine bar for a model
  without classes), or the report warns. Fewer than 2 x `STABILITY_HALF` images: the check is not run, and a
  line says so with the count (ranges measured on a few dozen images move with every image added).
"""

import dataclasses
import hashlib
import json

import numpy as np

from keras_vit.common import files as _files

from export.input_range import scale
from export.modes import FORMATS
from export.output_folder import manifest_file
from export.reparameterize import outlier_ratio
from export.runtimes import run_artifact
from export.scores import CLASSLESS
from export.tolerances import compare, tolerance
from export.verify import artifact_inputs, decision_failure

STABILITY_HALF = 50  # the fewest images in each half for the stability check
# `export.reparameterize.outlier_ratio` from which a model's post-LayerNorm channels count as outliers: the tests'
# 16 px ViT reads 1.7, and 51 with `with_outlier_channels`' 4 channels x 30 (the widest channel over the median one)
OUTLIER_RATIO = 10.0
NEAR_CHANCE = 2.0  # held-out accuracy under this many times chance (1 / classes): a model not (yet) trained


def image_list_sha256(samples):
    """SHA-256 (hex) of the calibration images as calibrated: float32 `(n, h, w, c)` bytes, C order."""
    samples = np.ascontiguousarray(np.asarray(samples, "float32"))
    digest = hashlib.sha256(str(samples.shape).encode())
    digest.update(samples.tobytes())
    return digest.hexdigest()


def describe_source(source):
    """The calibration source in words: "digits", a folder's path, a TFDS name, "NumPy array" or "tf.data.Dataset"."""
    if isinstance(source, (str, type(None))):
        return source if source is not None else "seeded uniform noise in [-1, 1] (no --calibration-data)"
    return "NumPy array" if isinstance(source, np.ndarray) else "tf.data.Dataset"


def manifest(name, quantization, samples, source, input_range, include_preprocessing):
    """The calibration manifest of one calibrated file, a JSON-ready dict.

    Args:
        name: the file's name, e.g. "model_int8.tflite".
        quantization: its mode.
        samples: the float32 images it was calibrated on, `(n, h, w, c)`, in the file's input range.
        source: the `calibration_data` given (`describe_source`).
        input_range: `(lo, hi)` the images were scaled to (the file's input range).
        include_preprocessing: whether the file scales raw pixels itself.

    Returns:
        {"file", "quantization", "images", "source", "preprocessing": {"image_size", "channels", "input_range",
        "resize", "include_preprocessing"}, "image_list_sha256"}.
    """
    samples = np.asarray(samples)
    return {
        "file": name,
        "quantization": quantization,
        "images": int(len(samples)),
        "source": describe_source(source),
        "preprocessing": {
            "image_size": [int(samples.shape[1]), int(samples.shape[2])],
            "channels": int(samples.shape[3]),
            "input_range": [float(v) for v in input_range],
            "resize": "bilinear, no crop (keras_vit.data)",
            "include_preprocessing": bool(include_preprocessing),
        },
        "image_list_sha256": image_list_sha256(samples),
    }


def calibrated(row):
    """True for a report row of a calibrated mode (`export.modes.Mode.calibrated`; a SavedModel is not)."""
    mode = FORMATS.get(row["format"], {}).get(row["quantization"])
    return bool(mode is not None and mode.calibrated)


def halves(samples):
    """Two disjoint halves of `samples`: even and odd positions."""
    return samples[0::2], samples[1::2]


def stability(make_outputs, samples, kind, quantization):
    """Calibrates twice more on two disjoint halves of `samples` and compares the two files.

    Args:
        make_outputs: `f(half) -> outputs`: makes the file from `half` (float32 images, the file's input range) and
            returns its outputs on the verification images.
        samples: every calibration image the file was made from.
        kind: the file's score kind ("probabilities", "logits", "outputs", "tokens", "features").
        quantization: its mode, for the bar (`export.tolerances.tolerance`).

    Returns:
        {"checked": False, "reason"} with fewer than 2 x `STABILITY_HALF` images; else {"checked": True,
        "half_images": [n1, n2], "figure", "value", "bar", "stable"}: the decisive top-1 agreement of the two files
        (the cosine for a model without classes) against the mode's own bar of that figure.
    """
    count = len(samples)
    if count < 2 * STABILITY_HALF:
        return {"checked": False,
                "reason": f"{count} calibration images: the stability check needs at least {2 * STABILITY_HALF} "
                          f"(two halves of {STABILITY_HALF})"}
    first, second = halves(samples)
    a, b = make_outputs(first), make_outputs(second)
    bars = tolerance(quantization, kind if kind in CLASSLESS else None)
    figure = "cosine" if kind in CLASSLESS else "decisive_top1_agreement"
    value = compare(a, b, kind=kind)[figure]
    bar = bars.get(figure)
    return {"checked": True, "half_images": [len(first), len(second)], "figure": figure,
            "value": None if value is None else float(value), "bar": bar,
            "stable": bool(value is not None and (bar is None or value >= bar))}


def weak_classes(row, min_images=10, margin=0.05):
    """Lines for the classes (of `min_images` images or more, by Keras' top-1) whose decisive agreement is more than
    `margin` below the file's agreement bar (one flip in 40 images is 2.5 points: a narrower margin names noise),
    from a verified row's `per_class_agreement` and `tolerance`; [] when none."""
    bar = (row.get("tolerance") or {}).get("decisive_top1_agreement")
    per_class = row.get("per_class_agreement") or {}
    if bar is None:
        return []
    return [f"class {c}: {agreement:.1%} agreement on its {n} images (bar {bar:.0%})"
            for c, (n, agreement) in sorted(per_class.items(), key=lambda kv: kv[1][1])
            if n >= min_images and agreement < bar - margin]


def check_calibrated_files(results, artifacts, make, graph, samples, source, eval_images):
    """The pipeline's calibration checks (`export.pipeline`): for every verified calibrated file, its manifest (with
    the stability check's result) as the row's "calibration" and as `<file>.calibration.json` beside the staged file,
    and the weak classes of every verified file as the row's "weak_classes".

    Args:
        results: `export.verify.verify`'s rows (updated in place).
        artifacts: the `export.verify.Artifact`s of those rows, in order.
        make: `make(fmt, quantization, path, samples)` writes one file as the pipeline does.
        graph: the `ServingGraph` (its input range, score kind, `include_preprocessing`).
        samples: the images every calibrated file was made from, in the files' input range.
        source: `calibration_data` as given (for the manifest's words).
        eval_images: the verification images in [-1, 1].

    Returns:
        `(warnings, diagnosis)`: the report's warning lines (too few images for the stability check, once; an
        unstable file; a weak class), and `diagnose`'s dict when a calibrated file missed a decision bar, else None.
    """
    warnings, too_few = [], None
    for row, artifact in zip(results, artifacts):
        if row.get("per_class_agreement"):
            row["weak_classes"] = weak_classes(row)
            warnings.extend(f"{row['name']}: {line}" for line in row["weak_classes"])
        if not (row["passed"] and calibrated(row)):
            continue

        def outputs_of(half, row=row, artifact=artifact):
            path = f"{artifact.path}.half"
            try:
                make(row["format"], row["quantization"], path, half)
                other = dataclasses.replace(artifact, path=path)
                return run_artifact(other, artifact_inputs(graph, other, eval_images))
            finally:
                _files.remove(path)

        if len(samples) >= 2 * STABILITY_HALF:
            print(f"{row['name']}: calibrating twice more, on two halves of the {len(samples)} images ...", flush=True)
        found = stability(outputs_of, samples, row["scores"], row["quantization"])
        info = manifest(row["name"], row["quantization"], samples, source, graph.input_range,
                        graph.include_preprocessing)
        info["stability"] = found
        row["calibration"] = info
        _files.write_text(manifest_file(row["path"]), json.dumps(info, indent=2))  # a temporary file, then a rename
        if not found["checked"]:
            too_few = found["reason"]
        elif not found["stable"]:
            warnings.append(f"{row['name']}: calibrated on two halves of the images, the two files agree on "
                            f"{found['value']:.1%} ({found['figure']}, bar {found['bar']}): its ranges depend on which "
                            "images calibrate it; calibrate on more images (--calibration-data)")
    if too_few:
        warnings.append(f"stability check not run: {too_few}")
    for line in warnings:
        print(f"WARNING: {line}", flush=True)
    missed = [row for row in results if calibrated(row) and decision_failure(row)]
    return warnings, (diagnose(graph, samples, missed) if missed else None)


def diagnose(graph, samples, missed):
    """What a calibrated file that missed its decision bar measured, for "what to try" (`export._cli_text`).

    Returns:
        {"files": the missed files' names, "outlier_ratio" (`export.reparameterize.outlier_ratio` on the
        calibration images; None for a model the rewrite does not know), "outlier_channels" (ratio >=
        `OUTLIER_RATIO`), "calibration_images", "unstable" (files whose stability check failed), "keras_accuracy"
        (None without labels), "chance_accuracy" (1 / classes), "near_chance" (accuracy under `NEAR_CHANCE` x
        chance)}.
    """
    images = np.asarray(scale(samples, graph.input_range, graph.model_range), "float32")
    ratio = outlier_ratio(graph.model, images[:64])
    accuracy = next((row["keras_accuracy"] for row in missed if row.get("keras_accuracy") is not None), None)
    chance = 1.0 / graph.classes if graph.classes and graph.classes > 1 else 0.5
    return {
        "files": [row["name"] for row in missed],
        "outlier_ratio": ratio,
        "outlier_channels": bool(ratio is not None and ratio >= OUTLIER_RATIO),
        "calibration_images": int(len(samples)),
        "unstable": [row["name"] for row in missed
                     if row.get("calibration", {}).get("stability", {}).get("stable") is False],
        "keras_accuracy": accuracy,
        "chance_accuracy": chance,
        "near_chance": bool(accuracy is not None and accuracy < NEAR_CHANCE * chance),
    }
