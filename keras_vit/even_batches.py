"""Batches that split evenly over the devices of Keras' data parallelism on JAX, whatever the data set's size.

Under `keras.distribution.DataParallel` each batch is split over the devices along its first axis, and JAX
refuses a batch that does not split evenly (`IndivisibleError`): a data set of 9 images in batches of 4 on 2
devices failed at its last batch of 1, in `fit`, `evaluate` and `predict` alike, and left the model unusable
(issue 29). Keras pads nothing. `training.compile_model` therefore gives a model compiled under such a
distribution its own `fit`, `evaluate` and `predict` (instance attributes, see `install`):

- `fit` drops the images of each batch beyond a multiple of the device count (at most devices - 1 per
  batch: the remainder of an epoch, which a shuffling pipeline draws anew each epoch);
- `predict` pads each batch to a multiple of the device count with zero images and trims their outputs;
- `evaluate` predicts so, then computes the compiled loss and metrics once over the real images, so every
  image counts exactly once.

Inputs: a batched `tf.data.Dataset` (the `keras_vit.data` pipelines), or NumPy arrays with `batch_size`. Other
inputs (generators, `keras.utils.PyDataset`) go to Keras as they are: their batches must split evenly. `fit`
refuses, before the first step, with a `ValueError` naming the batch size and the device count, NumPy arrays
whose `batch_size` is not a multiple of the device count and a data set whose batches hold fewer images than
devices; `validation_split` on arrays is split here as Keras splits it, then evened out like the rest.

A model loaded with `keras.saving.load_model` under such a distribution is compiled by Keras, not by
`compile_model`: call `keras_vit.even_batches.install(model)` on it.
"""

import inspect

import keras
import numpy as np

from keras_vit.common.backend import backend


def batch_devices():
    """How many devices the active `keras.distribution` splits a batch over: 1 without one, or off JAX."""
    if backend() != "jax":
        return 1
    distribution = keras.distribution.distribution()
    mesh = getattr(distribution, "device_mesh", None)
    name = getattr(distribution, "batch_dim_name", None)
    if mesh is None or name not in mesh.axis_names:
        return 1
    return int(mesh.shape[list(mesh.axis_names).index(name)])


def install(model):
    """Gives `model` the `fit`, `evaluate` and `predict` of this module when a distribution splits its batches.

    Called by `keras_vit.training.compile_model`. A no-op (returns False) with one device or off JAX.

    Returns:
        bool: whether they were installed.
    """
    devices = batch_devices()
    if devices <= 1:
        return False
    keras_fit, keras_evaluate = type(model).fit, type(model).evaluate

    def fit(*args, **kwargs):
        call = inspect.signature(keras_fit).bind(model, *args, **kwargs).arguments
        call.pop("self", None)
        call.update(call.pop("kwargs", {}))
        x, batch_size = call.get("x"), call.get("batch_size")
        if _is_dataset(x):
            first = _first_batch_size(x)
            if first is not None and first < devices:
                raise ValueError(_too_small(f"the data set's batches hold {first} image{'s' * (first != 1)}", devices))
            call["x"] = _trimmed(x, devices, first)
        elif _is_array(x):
            batch_size = batch_size or 32
            if batch_size % devices:
                raise ValueError(_too_small(f"batch_size={batch_size}", devices))
            split = call.pop("validation_split", 0.0) or 0.0
            if split and call.get("validation_data") is None:  # split here, as Keras does, then even both parts
                at = int(np.floor(_length(x) * (1.0 - split)))
                parts = [call.get(k) for k in ("x", "y", "sample_weight")]
                held_out = [_cut(v, slice(at, None)) for v in parts]
                call["validation_data"] = tuple(held_out if held_out[2] is not None else held_out[:2])
                for key, value in zip(("x", "y", "sample_weight"), parts):
                    call[key] = _cut(value, slice(0, at))
            keep = _array_count(call["x"], batch_size, devices)
            for key in ("x", "y", "sample_weight"):
                call[key] = _cut(call.get(key), slice(0, keep))
        return keras_fit(model, **call)

    def predict(x, batch_size=None, verbose="auto", steps=None, callbacks=None):
        if not (_is_dataset(x) or _is_array(x)):
            return type(model).predict(model, x, batch_size=batch_size, verbose=verbose, steps=steps,
                                       callbacks=callbacks)
        return _predict(model, _batches(x, None, None, batch_size, steps), devices, verbose)[0]

    def evaluate(x=None, y=None, batch_size=None, verbose="auto", sample_weight=None, steps=None, callbacks=None,
                 return_dict=False, **kwargs):
        if not (_is_dataset(x) or _is_array(x)):
            return keras_evaluate(model, x, y, batch_size, verbose, sample_weight, steps, callbacks, return_dict,
                                  **kwargs)
        if kwargs.pop("_use_cached_eval_dataset", False):  # fit's validation: its own progress bar speaks
            verbose = 0
        if isinstance(callbacks, keras.callbacks.CallbackList):
            callbacks.on_test_begin()
        outputs, y, sample_weight = _predict(model, _batches(x, y, sample_weight, batch_size, steps), devices,
                                             verbose)
        model.reset_metrics()
        loss = model.compute_loss(y=y, y_pred=outputs, sample_weight=sample_weight, training=False)
        logs = dict(model.compute_metrics(None, y, outputs, sample_weight))
        logs["loss"] = float(keras.ops.convert_to_numpy(loss))
        logs = {key: float(keras.ops.convert_to_numpy(value)) for key, value in logs.items()}
        if isinstance(callbacks, keras.callbacks.CallbackList):
            callbacks.on_test_end(logs)
        if return_dict:
            return logs
        values = [logs.pop("loss")] + list(logs.values())
        return values[0] if len(values) == 1 else values

    model.fit, model.evaluate, model.predict = fit, evaluate, predict
    return True


def _is_dataset(x):
    return type(x).__module__.startswith("tensorflow") and hasattr(x, "element_spec")


def _is_array(x):
    return isinstance(x, np.ndarray) or (isinstance(x, (tuple, list, dict)) and x and all(
        isinstance(v, np.ndarray) for v in keras.tree.flatten(x)))


def _length(x):
    return len(keras.tree.flatten(x)[0])


def _cut(x, part):
    """`x` (arrays, or a structure of them; None stays None) at the slice `part` of its first axis."""
    return None if x is None else keras.tree.map_structure(lambda a: a[part], x)


def _too_small(what, devices):
    return (f"keras.distribution splits each batch over {devices} devices, and {what}: give batches of a multiple "
            f"of {devices} images (batch_size=...)")


def _first_batch_size(dataset):
    """The number of images in the data set's first batch (it reads one batch), or None for an empty data set."""
    for batch in dataset.take(1):
        return int(keras.tree.flatten(batch)[0].shape[0])
    return None


def _array_count(x, batch_size, devices):
    """How many of the arrays' images `fit` keeps: the last batch cut to a multiple of `devices`."""
    n = _length(x)
    return n - n % (batch_size or 32) % devices


def _trimmed(dataset, devices, first=None):
    """`dataset` with each batch cut to a multiple of `devices` images; batches left empty are dropped.

    Where the number of batches left is known (a `keras_vit.data` pipeline: its `num_examples`, batches of
    `first` images) the result says so, so that Keras knows the epoch's length.
    """
    import tensorflow as tf

    def cut(*batch):
        count = tf.shape(tf.nest.flatten(batch)[0])[0] // devices * devices
        return tf.nest.map_structure(lambda t: t[:count], batch if len(batch) > 1 else batch[0])

    def nonempty(*batch):
        return tf.shape(tf.nest.flatten(batch)[0])[0] > 0

    trimmed = dataset.map(cut).filter(nonempty)
    batches, images = int(dataset.cardinality()), getattr(dataset, "num_examples", None)
    if batches >= 0 and images and first:
        last = images % first
        trimmed = trimmed.apply(tf.data.experimental.assert_cardinality(batches - (0 < last < devices)))
    return trimmed


def _batches(x, y, sample_weight, batch_size, steps):
    """Yields `(x, y, sample_weight)` batches as NumPy from a dataset or from arrays (y and weights may be None)."""
    if _is_dataset(x):
        for count, batch in enumerate(x.as_numpy_iterator()):
            if steps is not None and count >= steps:
                return
            batch = batch if isinstance(batch, tuple) else (batch,)
            yield batch[0], batch[1] if len(batch) > 1 else None, batch[2] if len(batch) > 2 else None
        return
    batch = batch_size or 32
    for count, start in enumerate(range(0, _length(x), batch)):
        if steps is not None and count >= steps:
            return
        part = slice(start, start + batch)
        yield (keras.tree.map_structure(lambda a: a[part], x), None if y is None else y[part],
               None if sample_weight is None else sample_weight[part])


def _predict(model, batches, devices, verbose):
    """Outputs of every batch, each padded with zero images to a multiple of `devices` and trimmed after;
    returns `(outputs, y, sample_weight)` concatenated (y, sample_weight None where the batches had none)."""
    outputs, ys, weights = [], [], []
    progress = keras.utils.Progbar(None, verbose=1 if verbose == "auto" else verbose) if verbose else None
    for step, (x, y, sample_weight) in enumerate(batches):
        count = _length(x)
        pad = -count % devices
        padded = x if not pad else keras.tree.map_structure(
            lambda a: np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)]), x)
        outputs.append(keras.tree.map_structure(lambda o: np.asarray(o)[:count], model.predict_on_batch(padded)))
        ys.append(y)
        weights.append(sample_weight)
        if progress:
            progress.update(step + 1)
    joined = keras.tree.map_structure(lambda *parts: np.concatenate(parts), *outputs)
    y = None if any(v is None for v in ys) else keras.tree.map_structure(lambda *p: np.concatenate(p), *ys)
    weight = None if any(w is None for w in weights) else np.concatenate(weights)
    return joined, y, weight
