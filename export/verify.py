"""Run each artifact in its own runtime and compare it with the Keras model.

Runtimes (`export.runtimes`): TensorFlow (SavedModel), LiteRT `ai_edge_litert` with its default
XNNPACK delegate (TFLite), onnxruntime's CPU provider (ONNX).
"""

import dataclasses
import os

import numpy as np

from export.fast_path import fast_path
from export.runtimes import latency_ms, run_artifact
from export.scores import CLASSLESS
from export.tolerances import (
    FEATURES_NOTE,
    MEDIAPIPE_FEATURES,
    MEDIAPIPE_TOKENS,
    TOKENS_NOTE,
    compare,
    failures,
    tolerance,
)

SEEDED_SAMPLES = 32


@dataclasses.dataclass
class Artifact:
    """One exported file: `format` is "saved_model", "tflite" or "onnx"."""

    name: str
    format: str
    path: str
    quantization: str = "float32"
    include_preprocessing: bool = False
    scores: str = None  # "probabilities" or "logits"; None: the serving graph's (probabilities for a Keras model)
    dynamic_size: bool = False  # takes any height and width: `verify` checks it at every size of `other_sizes` too
    input_range: tuple = None  # (lo, hi) its input takes; None: [0, 255] with include_preprocessing, else the model's


class VerificationError(RuntimeError):
    """An artifact's outputs are outside its tolerance; names the artifact and the figure."""


def reference_outputs(model, images, scores=None):
    """The outputs artifacts are checked against: the float32 twin's scores, float32 `(n, classes)`.

    Like with like: probabilities (the twin's outputs through a float64
    softmax where the serving graph adds one) or logits, as the artifact
    outputs them (`export.scores.score_kind`).

    Args:
        model: a Keras model (any dtype policy) or an `export.signature.ServingGraph`.
        images: float32 `(n, h, w, c)` in [-1, 1], scaled to the range the
            model takes (the graph's `model_range`; a Keras model's is read
            by `export.input_range.model_input_range`) before it runs.
        scores: "probabilities", "logits", or None: the graph's own
            (probabilities for a Keras model).

    Raises:
        ValueError: the model's head cannot give `scores`.
    """
    from export.input_range import UNIT, model_input_range, scale
    from export.signature import ServingGraph, float32_twin
    from export.scores import apply_activation, score_kind

    if isinstance(model, ServingGraph) and scores in (None, model.scores):
        return model.predict(images)
    twin = model.model if isinstance(model, ServingGraph) else float32_twin(model)
    target = model.model_range if isinstance(model, ServingGraph) else model_input_range(twin)[0]
    x = scale(np.asarray(images, dtype="float32"), UNIT, target).astype("float32")
    outputs = np.asarray(twin.predict(x, verbose=0), dtype="float32")
    return apply_activation(outputs, score_kind(twin, scores or "probabilities")[1])


def verify(model, artifacts, images, labels=None, raise_on_failure=True, measure_latency=True, mediapipe=True,
           other_sizes=()):
    """Verifies each artifact against the Keras model on the same images.

    The reference is the model's float32 twin (`export.signature.float32_twin`):
    a model trained under a mixed or low-precision policy is exported, and so
    compared, as the float32 computation of its weights.

    Args:
        model: the Keras model the artifacts were exported from, or the
            `export.signature.ServingGraph` they were converted from.
        artifacts: list of `Artifact`.
        images: float32 `(n, height, width, channels)` in [-1, 1] (the
            exporter's own range, what `keras_vit.data` gives), scaled to the
            range each artifact takes (`Artifact.input_range`: raw pixels
            (images + 1) * 127.5 for one built with `include_preprocessing`
            or from a model that takes [0, 255]) and to the model's own.
        labels: optional int `(n,)` class indices, for accuracy.
        raise_on_failure: bool, default True.
        measure_latency: bool, default True: median batch-1 latency.
        mediapipe: bool, default True: also classify each .tflite file's
            images, as uint8 frames, with MediaPipe Tasks' `ImageClassifier`
            (`export.mediapipe_check.figures`: mediapipe_top1_agreement,
            mediapipe_accuracy, or why it was skipped / is not supported).
            Reported, not a tolerance. Not run on a .tflite file of dynamic
            height and width, which MediaPipe 1.2.3 fails to invoke
            (docs/traps.md): `mediapipe_unsupported` says so.
        other_sizes: a list of `(images, labels)` at other sizes (`labels`
            may be None) for artifacts with `dynamic_size` (a model of any
            resolution): each is verified at every size against the model
            at that size, with the same tolerance.

    Returns:
        A list of dicts, one per artifact: name, format, quantization,
        scores, path, size_mb, the `compare` figures (at the size of
        `images`), latency_ms_batch1, tolerance, passed, failures,
        `verified_sizes` (the [height, width] sizes checked), for a
        dynamic-size artifact `at_sizes` ({"HxW": the `compare` figures at
        each other size}; a failure there is prefixed "at HxW:"), and for
        .tflite files with `mediapipe` the MediaPipe figures.

    Raises:
        VerificationError: with `raise_on_failure`, when any artifact fails a
            tolerance, outputs NaN/Inf or cannot run; the message names each
            failing artifact and figure.
    """
    images = np.asarray(images, dtype="float32")
    references = {}
    results = []
    for artifact in artifacts:
        if artifact.scores not in references:
            references[artifact.scores] = reference_outputs(model, images, artifact.scores)
        reference = references[artifact.scores]
        inputs = artifact_inputs(model, artifact, images)
        row = {
            "name": artifact.name,
            "format": artifact.format,
            "quantization": artifact.quantization,
            "scores": _score_kind(model, artifact),
            "path": artifact.path,
            "size_mb": _size_mb(artifact.path),
            "runs_fast_on": fast_path(artifact.format, artifact.quantization),
        }
        row["tolerance"] = tolerance(artifact.quantization, row["scores"])
        if row["scores"] in CLASSLESS:
            row["agreement"] = TOKENS_NOTE if row["scores"] == "tokens" else FEATURES_NOTE
        try:
            outputs = run_artifact(artifact, inputs)
            row.update(compare(reference, outputs, labels, row["scores"]))
            row["failures"] = failures(row, artifact.quantization)
            row["verified_sizes"] = [list(images.shape[1:3])]
            if artifact.dynamic_size and other_sizes:
                _verify_other_sizes(model, artifact, other_sizes, row)
            if mediapipe and artifact.format == "tflite" and row["scores"] in CLASSLESS:
                row["mediapipe_skipped"] = MEDIAPIPE_TOKENS if row["scores"] == "tokens" else MEDIAPIPE_FEATURES
            elif mediapipe and artifact.format == "tflite" and artifact.dynamic_size:
                # measured: MediaPipe 1.2.3's ImageClassifier fails on such a file ("interpreter_->Invoke() ==
                # kTfLiteOk (1 vs. 0)"), and it would resize frames to the unresized tensor's (1, 1) size
                row["mediapipe_unsupported"] = ("not run: the file's height and width are dynamic; MediaPipe 1.2.3 "
                                                "fails to invoke it. Export a fixed --image-size for MediaPipe")
            elif mediapipe and artifact.format == "tflite":
                from export.mediapipe_check import figures as mediapipe_figures

                row.update(mediapipe_figures(artifact.path, images, reference, labels, row["scores"]))
            if measure_latency:
                row["latency_ms_batch1"] = latency_ms(artifact, inputs[:1])
        except Exception as e:  # the runtime refused the artifact: that is a failed verification
            row["failures"] = [f"cannot run in its runtime: {type(e).__name__}: {first_line(e)}"]
        row["passed"] = not row["failures"]
        results.append(row)
    failed = [f"{r['name']}: {'; '.join(r['failures'])}" for r in results if not r["passed"]]
    if failed and raise_on_failure:
        raise VerificationError("verification failed for " + " | ".join(failed))
    return results


def _verify_other_sizes(model, artifact, other_sizes, row):
    """Runs a dynamic-size artifact at each other size against the model at that size; adds `at_sizes` and failures."""
    row["at_sizes"] = {}
    for images, labels in other_sizes:
        images = np.asarray(images, dtype="float32")
        size = f"{images.shape[1]}x{images.shape[2]}"
        inputs = artifact_inputs(model, artifact, images)
        figures = compare(reference_outputs(model, images, artifact.scores), run_artifact(artifact, inputs), labels,
                          _score_kind(model, artifact))
        row["at_sizes"][size] = figures
        row["failures"] += [f"at {size}: {failure}" for failure in failures(figures, artifact.quantization)]
        row["verified_sizes"].append(list(images.shape[1:3]))


def resized_images(images, size):
    """Images resized to (height, width): bilinear with half-pixel centres and antialiasing, float32, values kept
    in their range. What a dynamic-size artifact is verified on at its other size."""
    import tensorflow as tf

    out = tf.image.resize(np.asarray(images, "float32"), size, method="bilinear", antialias=True)
    return np.clip(out.numpy(), float(np.min(images)), float(np.max(images))).astype("float32")


def decision_failure(row):
    """True if a failed row broke only agreement/accuracy bars (what noise calibration can cause)."""
    return bool(row["failures"]) and all(f.split(" ")[0] in ("decisive_top1_agreement", "accuracy_drop") for f in row["failures"])


NOISE_HINT = (
    "verified on a seeded batch of random noise, where quantised models often flip decisions that real images "
    "do not; pass real images ({argument})"
)


def verification_images(data, shape, input_range=None, max_samples=64):
    """The images an export function verifies on, from its `verification_data` argument.

    Args:
        data: images in [-1, 1] as a NumPy array `(n, h, w, c)` (or one
            image `(h, w, c)`), a `tf.data.Dataset` (tuples, images or TFDS
            dicts), or an image folder: the forms of
            `export.images.representative_samples`.
        shape: (height, width, channels) of the model input.
        input_range: None ([-1, 1]) or the `(lo, hi)` range the images are
            given in (the model's, `ServingGraph.model_range`).

    Returns:
        float32 `(n, height, width, channels)`, at most `max_samples`.

    Raises:
        ValueError: no images, images of another shape, or images plainly
            in another range (`export.input_range.check_images_range`);
            names `verification_data`.
    """
    from export.images import representative_samples

    try:
        return representative_samples(data, shape, max_samples=max_samples, input_range=input_range)
    except ValueError as e:
        if str(e).startswith("representative_data: the calibration images"):  # check_images_range's, renamed
            raise ValueError(str(e).replace("representative_data: the calibration images",
                                            "verification_data: the verification images", 1)) from None
        detail = str(e).split("Received: ")[-1] if "Received: " in str(e) else "no images"
        expected = f"[{input_range[0]:g}, {input_range[1]:g}]" if input_range is not None else "[-1, 1]"
        raise ValueError(
            f"`verification_data` must hold images of shape (n, {', '.join(map(str, shape))}) in {expected}. "
            f"Received: {detail}"
        ) from None


def seeded_images(shape, n=SEEDED_SAMPLES):
    """A seeded batch of uniform noise in [-1, 1], float32 `(n, *shape)`: the default check of an export function."""
    return np.random.default_rng(0).uniform(-1.0, 1.0, (n, *shape)).astype("float32")


def check_artifact(graph, artifact, images=None, labels=None):
    """Runs one freshly written artifact against the float32 model; raises if it fails.

    What every export function does before it moves its file into place.

    Args:
        graph: the `export.signature.ServingGraph` the artifact came from.
        artifact: the `Artifact` (at its temporary path).
        images: float32 `(n, h, w, c)` in [-1, 1], or None for
            `seeded_images` (noise).

    Artifacts of a dynamic-size graph (`graph.dynamic_size`, a model of any
    resolution) are also checked at its other size (`graph.check_shapes`):
    on seeded noise of that size, or on `images` resized to it.

    Returns:
        The verification row (see `verify`).

    Raises:
        VerificationError: the artifact fails its tolerance; names the figure
            and, for quantised decisions on noise, how to check on real images.
    """
    noise = images is None
    if noise:
        images = seeded_images(graph.image_shape)
    other = []
    if artifact.dynamic_size:
        other = [(seeded_images(shape) if noise else resized_images(images, shape[:2]), None if noise else labels)
                 for shape in getattr(graph, "check_shapes", [])[1:]]
    row = verify(graph, [artifact], images, labels, raise_on_failure=False, measure_latency=False, mediapipe=False,
                 other_sizes=other)[0]
    if not row["passed"]:
        hint = f" ({NOISE_HINT.format(argument='verification_data=...')})" if noise and decision_failure(row) else ""
        raise VerificationError(f"{artifact.name}: {'; '.join(row['failures'])}{hint}")
    return row


def artifact_range(model, artifact):
    """The `(lo, hi)` range an artifact's input takes: its own `input_range`, else [0, 255] when it was built with
    `include_preprocessing`, else the range the model takes (`ServingGraph.model_range`, or read from a Keras model)."""
    from export.input_range import PIXELS, model_input_range
    from export.signature import ServingGraph

    if artifact.input_range is not None:
        return tuple(artifact.input_range)
    if artifact.include_preprocessing:
        return PIXELS
    return model.model_range if isinstance(model, ServingGraph) else model_input_range(model)[0]


def artifact_inputs(model, artifact, images):
    """Images in [-1, 1] as the artifact takes them, float32."""
    from export.input_range import UNIT, scale

    return np.asarray(scale(images, UNIT, artifact_range(model, artifact)), dtype="float32")


def _score_kind(model, artifact):
    """What the artifact outputs: "probabilities", "logits", "outputs", "features" or "tokens" (`export.scores.score_kind`)."""
    from export.signature import ServingGraph
    from export.scores import score_kind

    twin = model.model if isinstance(model, ServingGraph) else model
    default = model.scores if isinstance(model, ServingGraph) else "probabilities"
    return score_kind(twin, artifact.scores or default)[0]


def first_line(error):
    """The first non-blank line of an error's text, at most 300 characters ("" for an empty text): the one-line
    cause a report and the command lines show."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _size_mb(path):
    if os.path.isdir(path):
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    else:
        total = os.path.getsize(path)
    return total / 1e6
