"""Run each artifact in its own runtime and compare it with the Keras model.

Runtimes (`export.runtimes`): TensorFlow (SavedModel), LiteRT `ai_edge_litert` with its default
XNNPACK delegate (TFLite), onnxruntime's CPU provider (ONNX).
"""

import dataclasses
import os

import numpy as np

from export.fast_path import fast_path
from export.runtimes import (  # noqa: F401 (export.verify's names too)
    LATENCY_RUNS,
    _run_onnx,
    _run_saved_model,
    _run_tflite,
    _saved_model_call,
    _tflite_interpreter,
    _tflite_invoke,
    latency_ms,
    run_artifact,
)

# Tolerances per quantization mode, enforced by `verify`. Reasons:
# - float32: the same float32 maths, reordered by each runtime. The bar is relative to the logits'
#   scale: max |diff| / max |Keras output| <= 2e-5. An absolute bar fails correct exports of models
#   whose logits reach the hundreds (ViT-Ti/16 at 224 px, or a small ViT trained a while) and is too
#   loose for tiny logits. Measured (`python -m benchmarks.export_tolerance`, table in
#   benchmarks/README.md) on ViT-Ti/16, S/16 and B/16 at 224 px with logits up to 330: SavedModel 0,
#   TFLite and ONNX at most 1.5e-6. 2e-5 leaves a 13x margin and still fails a file whose head weights
#   are 1% off (tests/export/test_precision_and_checks.py).
# - float16: weights rounded to 10-bit mantissas; docs/traps.md reports logit drift of 0.03-0.16 on
#   attention models, so only the decision is bounded: top-1 agreement >= 99%.
# - dynamic_int8: int8 weights, activations quantised per batch at run time: top-1 agreement >= 98%.
# - int8: full-integer; LayerNorm, Softmax and GELU are sensitive (docs/traps.md): top-1 agreement
#   >= 97% and, with labels, an accuracy drop under 2 points.
# - int16x8, weight_only_int8, weight_only_int4 (LiteRT Quantizer, export/litert_quantization.py). Measured
#   on 360 held-out digits, decisive top-1 agreement / accuracy drop (points) per model, tiny = the tests'
#   16 px ViT (hidden 32, 1 layer, ~92% accurate), small = hidden 64 (93%), demo = `make demo`'s 803k-param
#   ViT (98.6%): int16x8 99.7-100/0 tiny over two seeds (100 on the tests' 96 images), 98.6-99.7/0.3 small,
#   100/0 demo, calibrated by `calibrate_min_max` (TensorFlow's int8 on the same models: 98.6-99.4,
#   97.5-98.1, 99.4; int16x8 with LiteRT Quantizer's own moving-average calibration, which clipped: 99.4
#   (96.9 on the 96 images), 98.1-98.3, 99.7); weight_only_int8 100/0,
#   99.7-100/0.3, 100/0; weight_only_int4 (per channel) 90.6-90.8/3.3, 96.4-96.7/2.2, 99.7/0.3. Bars:
#   int16x8 97% and 2 points (int8's: its lowest figure 98.6% leaves a margin); weight_only_int8 99%; weight_only_int4 95% and 3 points: int4 per channel
#   costs the narrowest models most (the tiny one misses the bar and is reported failed). dynamic_int4
#   (the same int4 weights, int8 activations at run time): tiny 95.8% raw agreement and logit cosine
#   0.968 on the tests' 96 images (weight_only_int4: the same), demo 99.4/0.3: the same bars as
#   weight_only_int4.
# Agreement counts only decisive flips: a different top-1 class where Keras preferred its own class by
# more than NEAR_TIE (1%) of that example's largest |output|. A near-tie (seen: the two top logits
# 0.002 apart, the float16 error 0.0087) is a coin toss for any rounding and says nothing about the
# file; the raw `top1_agreement` is reported beside it. With labelled data, `accuracy_drop` still
# counts every flip. Any NaN or Inf output fails every format.
TOLERANCES = {
    "float32": {"relative_max_abs_diff": 2e-5},
    "float16": {"decisive_top1_agreement": 0.99},
    "dynamic_int8": {"decisive_top1_agreement": 0.98},
    "int8": {"decisive_top1_agreement": 0.97, "accuracy_drop": 0.02},
    "int16x8": {"decisive_top1_agreement": 0.97, "accuracy_drop": 0.02},
    "int8_mixed16": {"decisive_top1_agreement": 0.97, "accuracy_drop": 0.02},  # int8's bars (issue 27)
    "weight_only_int8": {"decisive_top1_agreement": 0.99},
    "weight_only_int4": {"decisive_top1_agreement": 0.95, "accuracy_drop": 0.03},
    "dynamic_int4": {"decisive_top1_agreement": 0.95, "accuracy_drop": 0.03},
}
# A model that outputs a token sequence (batch, tokens, hidden_size) (`include_top=False, pooling=None`: the
# features dense heads are built on) has no decision to agree on: its files are verified token by token, by the
# relative difference (float32, as above) and by `cosine`, the mean over every image's tokens of the cosine of the
# file's token vector and Keras' (`compare`). Measured (`python -m benchmarks.token_tolerance`, table in
# benchmarks/README.md) on three digits ViTs trained at 16 px (hidden 32 / 1 layer, 64 / 2, make demo's 128 / 4),
# cut at encoder_norm, on the 360 held-out digits; the least mean token cosine of the three: float16 1.000000,
# dynamic_int8 0.99971 (ONNX 0.99966), int8 0.99414 (ONNX 0.99898), int16x8 0.99970, int8_mixed16 0.99875,
# weight_only_int8 0.99976, weight_only_int4 and dynamic_int4 0.9455 (the hidden-32 model, which misses the
# classification bar too; 0.9837 and 0.9895 on the other two). The bars sit under each least figure.
TOKEN_TOLERANCES = {
    "float32": {"relative_max_abs_diff": 2e-5},
    "float16": {"cosine": 0.9999},
    "dynamic_int8": {"cosine": 0.999},
    "int8": {"cosine": 0.99},
    "int16x8": {"cosine": 0.999},
    "int8_mixed16": {"cosine": 0.995},
    "weight_only_int8": {"cosine": 0.999},
    "weight_only_int4": {"cosine": 0.98},
    "dynamic_int4": {"cosine": 0.98},
}
MEDIAPIPE_TOKENS = ("skipped: MediaPipe's ImageClassifier reads classes, and the file outputs a token sequence "
                    "(batch, tokens, hidden_size)")
TOKENS_NOTE = ("top-1 agreement and accuracy do not apply: the model outputs a token sequence (batch, tokens, "
               "hidden_size), not classes; each file is verified token by token (relative difference, cosine)")
NEAR_TIE = 0.01
TIE_MARGIN = 0.04
LOWER_IS_BETTER = ("max_abs_diff", "relative_max_abs_diff", "accuracy_drop")
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


def compare(reference, outputs, labels=None, kind="probabilities"):
    """Figures of `outputs` against `reference` (both `(n, classes)`).

    Returns a dict:
        nonfinite_outputs: count of NaN/Inf values in `outputs`;
        max_abs_diff, mean_abs_diff: of the finite outputs (None if none);
        relative_max_abs_diff: max_abs_diff / max |reference| (the float32 bar);
        cosine: mean over examples of the cosine similarity of the two
            output vectors (None when any output is not finite);
        top1_agreement: share of examples with the same top-1 class;
        decisive_top1_agreement: the same, counting only decisive flips
            (Keras' margin for its class over the artifact's above
            `NEAR_TIE` x the example's largest |reference|, and the
            artifact scoring its class strictly above Keras' class: a tie
            in quantised outputs is no flip where Keras' margin is within
            `TIE_MARGIN` x its largest |output|);
        near_tie_flips: flips not counted as decisive;
        constant_outputs: True if two or more images all got the very same
            outputs (a file that cannot tell images apart; `failures` fails
            it in every mode), keras_constant_outputs: the same of the
            reference;
        with labels: accuracy, keras_accuracy, accuracy_drop (keras - artifact).

    `kind` ("probabilities", "logits" or "outputs") says how a one-output
    (binary) model decides: by a threshold, 0.5 or 0
    (`export.scores.decision_scores`); the decision figures use that.

    Token sequences, `(n, tokens, hidden_size)` (kind "tokens"), have no
    decision: their figures are `tokens` (the sequence length), the
    differences and `cosine` over every token (the mean over images and
    tokens of each token vector's cosine), `min_cosine` (the least token's),
    and `constant_outputs`; no agreement or accuracy (`labels` is ignored).

    Raises:
        ValueError: the reference (the Keras model's own outputs) is not finite.
    """
    reference = np.asarray(reference, dtype="float64")
    outputs = np.asarray(outputs, dtype="float64")
    if not np.isfinite(reference).all():
        raise ValueError("the Keras model's own outputs are not finite (NaN or Inf); nothing can be verified against them")
    if reference.ndim == 3:
        return _compare_tokens(reference, outputs)
    finite = np.isfinite(outputs)
    diff = np.abs(outputs - reference)[finite]
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    figures = {"nonfinite_outputs": int((~finite).sum())}
    several = len(outputs) >= 2 and outputs.size
    figures["constant_outputs"] = bool(several and finite.all() and (outputs == outputs[:1]).all())
    figures["keras_constant_outputs"] = bool(several and (reference == reference[:1]).all())
    if diff.size:
        figures["max_abs_diff"] = float(diff.max())
        figures["mean_abs_diff"] = float(diff.mean())
        figures["relative_max_abs_diff"] = float(diff.max() / scale) if scale > 0 else (0.0 if diff.max() == 0 else None)
    else:
        figures.update(max_abs_diff=None, mean_abs_diff=None, relative_max_abs_diff=None)
    if finite.all():
        dot = (outputs * reference).sum(-1)
        norms = np.linalg.norm(outputs, axis=-1) * np.linalg.norm(reference, axis=-1)
        figures["cosine"] = float(np.where(norms > 0, dot / np.maximum(norms, 1e-30), 1.0).mean())
    else:
        figures["cosine"] = None
    from export.scores import decision_scores

    reference, outputs = decision_scores(reference, kind), decision_scores(outputs, kind)
    top_ref = reference.argmax(-1)
    top_out = np.where(finite.all(-1), np.nan_to_num(outputs, nan=-np.inf).argmax(-1), -1)
    flips = top_out != top_ref
    rows = np.arange(len(reference))
    margin = reference[rows, top_ref] - reference[rows, np.maximum(top_out, 0)]
    near_tie = flips & (top_out >= 0) & (margin <= NEAR_TIE * np.abs(reference).max(-1))
    # a tie in the artifact's own outputs (int8 probabilities come in steps of 1/256) where Keras' margin is within
    # TIE_MARGIN of its largest |output| is no preference for another class; an artifact whose outputs are all equal
    # still flips decisively wherever Keras was sure
    safe = np.nan_to_num(outputs, nan=-np.inf)
    tie = safe[rows, top_ref] >= safe[rows, np.maximum(top_out, 0)]
    near_tie |= flips & (top_out >= 0) & tie & (margin <= TIE_MARGIN * np.abs(reference).max(-1))
    figures["top1_agreement"] = float((~flips).mean())
    figures["decisive_top1_agreement"] = float((~flips | near_tie).mean())
    figures["near_tie_flips"] = int(near_tie.sum())
    if labels is not None:
        labels = np.asarray(labels).reshape(-1)
        figures["accuracy"] = float((top_out == labels).mean())
        figures["keras_accuracy"] = float((top_ref == labels).mean())
        figures["accuracy_drop"] = figures["keras_accuracy"] - figures["accuracy"]
    return figures


def _compare_tokens(reference, outputs):
    """`compare`'s figures for token sequences `(n, tokens, hidden_size)`: differences and cosines per token."""
    finite = np.isfinite(outputs)
    figures = {"tokens": int(reference.shape[1]), "nonfinite_outputs": int((~finite).sum())}
    several = len(outputs) >= 2 and outputs.size
    figures["constant_outputs"] = bool(several and finite.all() and (outputs == outputs[:1]).all())
    figures["keras_constant_outputs"] = bool(several and (reference == reference[:1]).all())
    diff = np.abs(outputs - reference)[finite]
    scale = float(np.abs(reference).max()) if reference.size else 0.0
    if diff.size:
        figures["max_abs_diff"] = float(diff.max())
        figures["mean_abs_diff"] = float(diff.mean())
        figures["relative_max_abs_diff"] = float(diff.max() / scale) if scale > 0 else (0.0 if diff.max() == 0 else None)
    else:
        figures.update(max_abs_diff=None, mean_abs_diff=None, relative_max_abs_diff=None)
    if finite.all():
        dot = (outputs * reference).sum(-1)
        norms = np.linalg.norm(outputs, axis=-1) * np.linalg.norm(reference, axis=-1)
        cosines = np.where(norms > 0, dot / np.maximum(norms, 1e-30), 1.0)
        figures["cosine"], figures["min_cosine"] = float(cosines.mean()), float(cosines.min())
    else:
        figures["cosine"] = figures["min_cosine"] = None
    return figures


def tolerance(quantization, kind=None):
    """The bars of `quantization` for files of score kind `kind`: `TOKEN_TOLERANCES` for "tokens", else `TOLERANCES`."""
    return (TOKEN_TOLERANCES if kind == "tokens" else TOLERANCES)[quantization]


def failures(figures, quantization):
    """Returns the list of "figure value vs limit" strings that break the tolerance.

    Any non-finite output is a failure in every mode. Token sequences
    (figures with `tokens`, see `compare`) are held to `TOKEN_TOLERANCES`.
    """
    broken = []
    if figures.get("nonfinite_outputs"):
        broken.append(f"outputs are not finite: {figures['nonfinite_outputs']} NaN/Inf values")
    if figures.get("constant_outputs"):
        why = ("the Keras model's too: an untrained model (keras_vit's head starts at zero), or images it cannot tell "
               "apart" if figures.get("keras_constant_outputs") else "where the Keras model's differ")
        broken.append(f"outputs are the same for every image ({why}): nothing an app could decide on")
    for key, limit in tolerance(quantization, "tokens" if "tokens" in figures else None).items():
        value = figures.get(key)
        if key not in figures or (value is None and broken):
            continue
        lower = key in LOWER_IS_BETTER
        if value is None or (value > limit if lower else value < limit):
            shown = "undefined" if value is None else f"{value:.6g}"
            broken.append(f"{key} = {shown} (needs {'<=' if lower else '>='} {limit})")
    return broken


def reference_outputs(model, images, scores=None):
    """The outputs artifacts are checked against: the float32 twin's scores, float32 `(n, classes)`.

    Like with like: probabilities (the twin's outputs through a float64
    softmax where the serving graph adds one) or logits, as the artifact
    outputs them (`export.signature.score_kind`).

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
    from export.signature import ServingGraph, apply_activation, float32_twin, score_kind

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
        inputs = _artifact_inputs(model, artifact, images)
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
        if row["scores"] == "tokens":
            row["agreement"] = TOKENS_NOTE
        try:
            outputs = run_artifact(artifact, inputs)
            row.update(compare(reference, outputs, labels, row["scores"]))
            row["failures"] = failures(row, artifact.quantization)
            row["verified_sizes"] = [list(images.shape[1:3])]
            if artifact.dynamic_size and other_sizes:
                _verify_other_sizes(model, artifact, other_sizes, row)
            if mediapipe and artifact.format == "tflite" and row["scores"] == "tokens":
                row["mediapipe_skipped"] = MEDIAPIPE_TOKENS
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
            row["failures"] = [f"cannot run in its runtime: {type(e).__name__}: {_first_line(e)}"]
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
        inputs = _artifact_inputs(model, artifact, images)
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


def _artifact_inputs(model, artifact, images):
    """Images in [-1, 1] as the artifact takes them, float32."""
    from export.input_range import UNIT, scale

    return np.asarray(scale(images, UNIT, artifact_range(model, artifact)), dtype="float32")


def _score_kind(model, artifact):
    """What the artifact outputs: "probabilities", "logits", "outputs" or "tokens" (`export.signature.score_kind`)."""
    from export.signature import ServingGraph, score_kind

    twin = model.model if isinstance(model, ServingGraph) else model
    default = model.scores if isinstance(model, ServingGraph) else "probabilities"
    return score_kind(twin, artifact.scores or default)[0]


def _first_line(error):
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return lines[0][:300] if lines else ""


def _size_mb(path):
    if os.path.isdir(path):
        total = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)
    else:
        total = os.path.getsize(path)
    return total / 1e6
