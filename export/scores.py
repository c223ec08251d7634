"""What an artifact outputs: probabilities (a softmax, or a sigmoid for one logit, added in the graph), logits, the
model's own outputs, a feature vector or a token sequence; and the float64 references of those activations."""

SCORES = ("probabilities", "logits")
# Kinds of output with no classes: no labels, top-1 agreement, accuracy or ImageClassifier; verified vector by vector
# (export.tolerances.TOKEN_TOLERANCES).
CLASSLESS = ("tokens", "features")
# kind -> (what it is, its shape): the one place messages, notes and metadata take their words from
CLASSLESS_OUTPUTS = {
    "tokens": ("token sequence", "(batch, tokens, hidden_size)"),
    "features": ("feature vector", "(batch, hidden_size)"),
}


def describe_output(kind, shape=None):
    """"a token sequence (batch, tokens, hidden_size)" or "a feature vector (batch, hidden_size)" for a kind of
    `CLASSLESS`; `shape`: None (the symbolic shape), False (no shape) or the text of a concrete one."""
    what, symbolic = CLASSLESS_OUTPUTS[kind]
    shape = symbolic if shape is None else shape
    return f"a {what} {shape}" if shape else f"a {what}"


def is_feature_vector(model):
    """True for a model whose output is one pooled vector an image, `(batch, hidden_size)`: a backbone built with
    `include_top=False` and a `pooling` (what `keras-vit-pretrain` writes), its last layer keras_vit's
    `SequencePooling` or a Keras global pooling layer. Its values are features, not classes. A model that ends in
    anything else (a Dense head, a softmax `Activation` layer) is not: its outputs may be scores."""
    import keras

    from keras_vit.layers.classifier_head import head_layer
    from keras_vit.layers.sequence_pooling import SequencePooling

    pooling = (SequencePooling, keras.layers.GlobalAveragePooling1D, keras.layers.GlobalAveragePooling2D,
               keras.layers.GlobalMaxPooling1D, keras.layers.GlobalMaxPooling2D)
    return len(model.output_shape) == 2 and isinstance(head_layer(model), pooling)


def score_kind(model, scores="probabilities"):
    """What a model's artifact outputs for `scores`, and the activation the graph must add (None if none).

    The head is the model's last layer (keras_vit's `predictions` Dense
    layer, `classifier_activation` its activation). With
    `scores="probabilities"` a head without activation (None / "linear")
    gets a softmax in the serving graph, or a sigmoid when it has a single
    output (a binary classifier: a softmax over one logit is 1.0 for every
    image); a softmax head is kept as it is (no second softmax). With
    `scores="logits"` a head without activation is kept. A model whose last
    layer is not a Dense layer (`include_top=False`) or whose head has
    another activation (e.g. a multi-label sigmoid) keeps its outputs
    unchanged: kind "outputs". A model without a Dense head that outputs
    one vector an image, `(batch, hidden_size)` (a backbone built with
    `include_top=False` and a `pooling`, what `keras-vit-pretrain` writes),
    keeps it too: kind "features", whatever `scores` says. A model that
    outputs a sequence, `(batch, tokens, hidden_size)` (a backbone built
    with `include_top=False, pooling=None`: the features dense heads are
    built on), keeps it too: kind "tokens", whatever `scores` says.

    Args:
        model: a Keras model.
        scores: "probabilities" (default) or "logits".

    Returns:
        `(kind, activation)`: kind is "probabilities", "logits", "outputs",
        "features" or "tokens"; activation "softmax", "sigmoid" or None.

    Raises:
        ValueError: `scores` is not one of `SCORES`; logits asked of a head
            with an activation (they are not in the graph).
    """
    import keras

    if scores not in SCORES:
        raise ValueError(f"`scores` must be one of {', '.join(map(repr, SCORES))}. Received: scores={scores!r}")
    from keras_vit.layers.classifier_head import head_layer

    if len(model.output_shape) == 3:
        return "tokens", None
    if is_feature_vector(model):
        return "features", None
    head = head_layer(model)
    if not isinstance(head, keras.layers.Dense):
        return "outputs", None
    activation = getattr(head.activation, "__name__", str(head.activation))
    if activation in ("linear", "None"):
        if scores == "logits":
            return "logits", None
        return "probabilities", "sigmoid" if int(head.units) == 1 else "softmax"
    if activation == "softmax":
        if scores == "logits":
            raise ValueError(f"the model's head {head.name!r} applies softmax: its logits are not in the graph; "
                             "export scores='probabilities' or rebuild the model with classifier_activation=None. "
                             f"Received: scores={scores!r}")
        if int(head.units) == 1:
            raise ValueError(f"the model's head {head.name!r} applies softmax to a single output, which is 1.0 for "
                             "every image: nothing an app could use. Build a binary classifier with classes=1 and "
                             "classifier_activation='sigmoid' (or None: the export adds the sigmoid), or classes=2")
        return "probabilities", None
    if activation == "sigmoid" and int(head.units) == 1:
        if scores == "logits":
            raise ValueError(f"the model's head {head.name!r} applies sigmoid: its logit is not in the graph; rebuild "
                             f"the model with classifier_activation=None. Received: scores={scores!r}")
        return "probabilities", None
    if scores == "logits":
        raise ValueError(f"the model's head {head.name!r} applies {activation!r}: its logits are not in the graph; "
                         f"rebuild the model with classifier_activation=None. Received: scores={scores!r}")
    return "outputs", None


def sigmoid(logits):
    """Sigmoid in float64 (the reference for graphs that add one), float32 out."""
    import numpy as np

    return (1.0 / (1.0 + np.exp(-np.asarray(logits, dtype="float64")))).astype("float32")


def apply_activation(outputs, activation):
    """`outputs` through the score activation a graph adds ("softmax", "sigmoid" or None), in float64, float32 out."""
    if activation == "softmax":
        return softmax(outputs)
    if activation == "sigmoid":
        return sigmoid(outputs)
    return outputs


def softmax(logits):
    """Softmax over the last axis in float64 (the reference for graphs that add one), float32 out."""
    import numpy as np

    x = np.asarray(logits, dtype="float64")
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True)).astype("float32")


def decision_scores(outputs, kind="probabilities"):
    """Scores whose argmax is the decision: `outputs` as they are, or for one output (a binary classifier) two columns.

    A one-output head decides by a threshold, not an argmax (an argmax over
    one column is always class 0): 0.5 for probabilities (a sigmoid), 0 for
    logits. Its two columns are `[t - x, x - t]`: class 1 (the class
    `labels.txt` names, label 1 of a two-class folder) where x > t, with the
    margin |x - t| on both sides.

    Args:
        outputs: `(n, classes)` array.
        kind: "probabilities", "logits" or "outputs" (what the outputs are).

    Returns:
        float64 `(n, classes)`, or `(n, 2)` for one output.
    """
    import numpy as np

    outputs = np.asarray(outputs, dtype="float64")
    if outputs.ndim != 2 or outputs.shape[-1] != 1:
        return outputs
    threshold = 0.0 if kind == "logits" else 0.5
    return np.concatenate([threshold - outputs, outputs - threshold], axis=-1)
