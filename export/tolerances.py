"""What each exported file is held to: the figures of its outputs against the Keras model's, and the bars.

`compare` computes the figures (differences, cosine, top-1 agreement, accuracy; per token for a token
sequence), `failures` holds them to `TOLERANCES` (or `TOKEN_TOLERANCES`) of the file's mode. `export.verify`
runs the files and uses both.
"""

import numpy as np

from export.modes import FORMATS
from export.scores import CLASSLESS, decision_scores

# The bars of each mode (`export.modes`' records, with the measurements behind them), enforced by `verify`.
# A mode of both formats (float32, dynamic_int8, int8) has one set of bars.
# Agreement counts only decisive flips: a different top-1 class where Keras preferred its own class by
# more than NEAR_TIE (1%) of that example's largest |output|. A near-tie (seen: the two top logits
# 0.002 apart, the float16 error 0.0087) is a coin toss for any rounding and says nothing about the
# file; the raw `top1_agreement` is reported beside it. With labelled data, `accuracy_drop` still
# counts every flip. Any NaN or Inf output fails every format.
TOLERANCES = {mode.name: dict(mode.tolerances) for table in FORMATS.values() for mode in table.values()}
# A model that outputs a token sequence (batch, tokens, hidden_size) (`include_top=False, pooling=None`: the
# features dense heads are built on) has no decision to agree on: its files are verified token by token, by the
# relative difference (float32, as above) and by `cosine`, the mean over every image's tokens of the cosine of the
# file's token vector and Keras' (`compare`).
TOKEN_TOLERANCES = {mode.name: dict(mode.token_tolerances) for table in FORMATS.values() for mode in table.values()}
# A backbone's feature vector (batch, hidden_size) (`include_top=False` with a `pooling`: one token, or the mean of
# them) is held to the same bars, per image: it has no classes either.
MEDIAPIPE_TOKENS = ("skipped: MediaPipe's ImageClassifier reads classes, and the file outputs a token sequence "
                    "(batch, tokens, hidden_size)")
MEDIAPIPE_FEATURES = ("skipped: MediaPipe's ImageClassifier reads classes, and the file outputs a feature vector "
                      "(batch, hidden_size); apps read it with MediaPipe's ImageEmbedder or LiteRT's Interpreter")
FEATURES_NOTE = ("top-1 agreement and accuracy do not apply: the model outputs a feature vector (batch, hidden_size), "
                 "not classes; each file is verified image by image (relative difference, cosine)")
TOKENS_NOTE = ("top-1 agreement and accuracy do not apply: the model outputs a token sequence (batch, tokens, "
               "hidden_size), not classes; each file is verified token by token (relative difference, cosine)")
NEAR_TIE = 0.01
TIE_MARGIN = 0.04
LOWER_IS_BETTER = ("max_abs_diff", "relative_max_abs_diff", "accuracy_drop")


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
        per_class_agreement: {class index as str: [images, decisive top-1
            agreement]} over the images Keras puts in that class (its top-1),
            so that one class that flips is seen, not averaged away;
        with labels: accuracy, keras_accuracy, accuracy_drop (keras - artifact).

    `kind` ("probabilities", "logits" or "outputs") says how a one-output
    (binary) model decides: by a threshold, 0.5 or 0
    (`export.scores.decision_scores`); the decision figures use that.

    Token sequences, `(n, tokens, hidden_size)` (kind "tokens"), have no
    decision: their figures are `tokens` (the sequence length), the
    differences and `cosine` over every token (the mean over images and
    tokens of each token vector's cosine), `min_cosine` (the least token's),
    and `constant_outputs`; no agreement or accuracy (`labels` is ignored).
    Feature vectors, `(n, hidden_size)` (kind "features"), get the same
    figures with `features` (hidden_size) in place of `tokens`, one vector
    an image.

    Raises:
        ValueError: the reference (the Keras model's own outputs) is not finite.
    """
    reference = np.asarray(reference, dtype="float64")
    outputs = np.asarray(outputs, dtype="float64")
    if not np.isfinite(reference).all():
        raise ValueError("the Keras model's own outputs are not finite (NaN or Inf); nothing can be verified against them")
    if reference.ndim == 3:
        return _compare_tokens(reference, outputs)
    if kind == "features":
        figures = _compare_tokens(reference[:, None, :], outputs.reshape(reference.shape)[:, None, :])
        del figures["tokens"]
        return {"features": int(reference.shape[-1]), **figures}
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
    kept = ~flips | near_tie  # a flip between near-tied classes is no lost decision
    figures["decisive_top1_agreement"] = float(kept.mean())
    figures["near_tie_flips"] = int(near_tie.sum())
    figures["per_class_agreement"] = {str(c): [int((top_ref == c).sum()), float(kept[top_ref == c].mean())]
                                      for c in np.unique(top_ref)}
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
    """The bars of `quantization` for files of score kind `kind`: `TOKEN_TOLERANCES` for "tokens" and "features"
    (`export.scores.CLASSLESS`), else `TOLERANCES`."""
    return (TOKEN_TOLERANCES if kind in CLASSLESS else TOLERANCES)[quantization]


def failures(figures, quantization):
    """Returns the list of "figure value vs limit" strings that break the tolerance.

    Any non-finite output is a failure in every mode. Token sequences and
    feature vectors (figures with `tokens` or `features`, see `compare`)
    are held to `TOKEN_TOLERANCES`.
    """
    broken = []
    if figures.get("nonfinite_outputs"):
        broken.append(f"outputs are not finite: {figures['nonfinite_outputs']} NaN/Inf values")
    if figures.get("constant_outputs"):
        why = ("the Keras model's too: an untrained model (keras_vit's head starts at zero), or images it cannot tell "
               "apart" if figures.get("keras_constant_outputs") else "where the Keras model's differ")
        broken.append(f"outputs are the same for every image ({why}): nothing an app could decide on")
    for key, limit in tolerance(quantization, next((k for k in CLASSLESS if k in figures), None)).items():
        value = figures.get(key)
        if key not in figures or (value is None and broken):
            continue
        lower = key in LOWER_IS_BETTER
        if value is None or (value > limit if lower else value < limit):
            shown = "undefined" if value is None else f"{value:.6g}"
            broken.append(f"{key} = {shown} (needs {'<=' if lower else '>='} {limit})")
    return broken
