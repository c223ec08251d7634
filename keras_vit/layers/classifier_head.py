"""The classification head, a `keras.layers.Dense` that also carries the class names into the `.keras` file."""

import keras


def check_class_names(class_names, classes, argument="class_names"):
    """Returns `class_names` as a list of str, or None; raises ValueError for anything else.

    Args:
        class_names: None, or a list/tuple of `classes` distinct non-empty
            strings without line breaks (one per output, in output order).
        classes: int, the number of outputs of the head.
        argument: the name used in messages.

    Raises:
        ValueError: not a list or tuple of strings, an empty or repeated
            name, a name with a line break (labels files hold one per line),
            or a length other than `classes`; names `argument` and both counts.
    """
    if class_names is None:
        return None
    if isinstance(class_names, (str, bytes)) or not isinstance(class_names, (list, tuple)):
        raise ValueError(f"`{argument}` must be None or a list of {classes} class names (str). "
                         f"Received: {argument} of type {type(class_names).__name__}")
    names = list(class_names)
    bad = [n for n in names if not isinstance(n, str) or not n.strip() or "\n" in n or "\r" in n]
    if bad:
        raise ValueError(f"`{argument}` must hold non-empty strings without line breaks. Received: {bad[0]!r} in "
                         f"{argument}={names[:8]!r}{' ...' if len(names) > 8 else ''}")
    if len(names) != classes:
        raise ValueError(f"`{argument}` must name each of the head's {classes} classes. Received: {len(names)} names "
                         f"({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")
    if len(set(names)) != len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        raise ValueError(f"`{argument}` must be distinct. Received: {repeated!r} more than once")
    return names


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassifierHead(keras.layers.Dense):
    """`keras.layers.Dense` (the head, `predictions`) that also stores the names of its classes.

    The same computation, variables (`kernel`, `bias`) and weight paths as
    `keras.layers.Dense`, so checkpoints, converters and `.weights.h5` files
    read it as Dense; `isinstance(head, keras.layers.Dense)` holds. Its
    config adds `class_names`, so the names travel with the model inside its
    `.keras` file, from `keras-vit-train` (the data set's class folders) to
    `keras-vit-export` (the TFLite metadata's and `labels.txt`'s labels).
    `.keras` files saved before the head had names load as plain Dense.

    Args:
        units: int, the number of classes.
        class_names: None (default) or a list of `units` distinct class
            names, output `i` named `class_names[i]`.
        **kwargs: `keras.layers.Dense`'s arguments.

    Input shape: `(batch, features)`. Output shape: `(batch, units)`, as Dense.

    Raises:
        ValueError: bad `class_names` (`check_class_names`).

    Example:

    >>> head = ClassifierHead(2, class_names=["cat", "dog"])
    >>> head.get_config()["class_names"]
    ['cat', 'dog']
    """

    def __init__(self, units, class_names=None, **kwargs):
        super().__init__(units, **kwargs)
        self.class_names = check_class_names(class_names, self.units)

    def set_class_names(self, class_names):
        """Sets (or with None clears) the names of the classes; checked as in `__init__`.

        Raises:
            ValueError: bad `class_names` (`check_class_names`).
        """
        self.class_names = check_class_names(class_names, self.units)

    def quantize(self, mode=None, type_check=True, config=None):
        """`keras.layers.Dense.quantize` (Keras' `model.quantize`): the same computation, so the same quantisation.

        Dense refuses its subclasses by default (`type_check`), which would
        leave the head in float while the rest of the model is quantised.
        """
        super().quantize(mode, type_check=False, config=config)

    def get_config(self):
        return {**super().get_config(), "class_names": None if self.class_names is None else list(self.class_names)}


def head_layer(model):
    """The head of a model: its last layer, looked for inside a nested model that ends it (`keras.Sequential([vit])`)."""
    layer = model
    while isinstance(layer, keras.Model) and layer.layers:
        layer = layer.layers[-1]
    return layer


def model_class_names(model):
    """The class names a model's head carries, or None.

    The head is the model's last layer, looked for inside a nested model
    that ends it (`keras.Sequential([vit])`, or a functional model whose
    output is a keras_vit ViT's): names only come from a `ClassifierHead`.

    Args:
        model: a Keras model.

    Returns:
        A list of str (one per output), or None when the head carries none.
    """
    layer = head_layer(model)
    return list(layer.class_names) if isinstance(layer, ClassifierHead) and layer.class_names else None


def set_model_class_names(model, class_names):
    """Stores `class_names` in a model's head if it is a `ClassifierHead`; returns whether it could.

    The head is found as in `model_class_names`. A plain `keras.layers.Dense`
    head (a `.keras` file saved before keras_vit had `ClassifierHead`, or a
    user's own head) cannot keep them: False.

    Raises:
        ValueError: bad `class_names` for the head (`check_class_names`).
    """
    layer = head_layer(model)
    if not isinstance(layer, ClassifierHead):
        return False
    layer.set_class_names(class_names)
    return True
