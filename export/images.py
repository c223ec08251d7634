"""Calibration and verification images for an export: from a named source (digits, a folder, TFDS, a dataset),
and the calibration images a format function is given (`representative_samples`)."""

import collections
import math
import os

import numpy as np

from export.input_range import PIXELS, UNIT, check_images_range, scale
from export.signature import ServingGraph
from export.sizes import image_shape

VERIFY_SAMPLES = 512
FOLDER_SPLIT = 0.2  # the verification share of each class of an image folder (keras_vit.data's stratified split)
SEEDED_SAMPLES = 64
DEFAULT_CALIBRATION_STEPS = 200


def load_data(source, model, max_samples=VERIFY_SAMPLES, class_names=None):
    """Calibration and verification images for a model from a named data source.

    Args:
        source: None (a seeded batch of uniform noise in [-1, 1]), "digits"
            (calibration on the training split, verification on the fixed
            held-out split), the path of an image folder (80/20 split,
            seed 0), a TFDS name (splits "train" / "test", read from the
            local TFDS folder), a NumPy array of images `(n, h, w, c)`
            (used as an unlabelled dataset), or a `tf.data.Dataset` of images
            (elements `(images, labels)`, images, or TFDS-style dicts
            `{"image": ..., "label": ...}`; used for both calibration and
            verification), in the range the model takes (a `ServingGraph`'s
            `model_range`; [-1, 1] for a Keras model).
        model: the model or its `ServingGraph`, for its input size and channels.
        max_samples: int, the most images of each kind.
        class_names: None, or lists of names of the model's outputs in order (its own, then the labels given):
            an image folder whose class folders are some of the first such list's names (a calibration folder
            that lacks a class) keeps each folder's label by that list (`keras_vit.data.from_directory(
            class_names=...)`), not numbered from 0 in folder order. A folder of other names is read as it is
            (`export.contract.label_names` judges).

    Returns:
        `(calibration_images, eval_images, eval_labels, class_names)`: float32
        arrays in [-1, 1] (the exporter's own range, see
        `export.input_range`); labels and class names None for the seeded
        batch.

    Raises:
        ValueError: a source that is none of the above, or yields no
            images; a dataset whose images are plainly in another range
            than the model takes (`export.input_range.check_images_range`).
    """
    import tensorflow as tf

    from keras_vit import data
    from keras_vit.data.image_folder import list_image_folder

    height, width, channels = model.image_shape if isinstance(model, ServingGraph) else image_shape(model)
    common = {"image_size": (height, width), "channels": channels, "batch_size": 64}
    if source is None:
        rng = np.random.default_rng(0)
        images = rng.uniform(-1, 1, (SEEDED_SAMPLES, height, width, channels)).astype("float32")
        return images, images, None, None
    if isinstance(source, np.ndarray):  # images as an array (n, h, w, c), as export_tflite takes them: no labels
        if source.ndim != 4:
            raise ValueError(f"calibration_data as an array must be images (n, {height}, {width}, {channels}). "
                             f"Received: an array of shape {source.shape}")
        source = tf.data.Dataset.from_tensor_slices(source).batch(64)
    if isinstance(source, tf.data.Dataset):
        images, labels = _take_elements(source, max_samples)
        if len(images) == 0:
            raise ValueError("the calibration dataset yielded no images")
        if images.shape[1:] != (height, width, channels):
            raise ValueError(f"calibration images must have shape (n, {height}, {width}, {channels}). "
                             f"Received: images of shape {images.shape}")
        given = model.model_range if isinstance(model, ServingGraph) else UNIT  # as the model takes them
        check_images_range(images, given, argument="calibration_data")
        images = scale(images, given, UNIT).astype("float32")  # to the exporter's [-1, 1]
        return images, images, labels, None
    if source == "digits":
        # unshuffled, like the image-folder split: the same calibration images, so the same int8 file, every run
        calibration, held_out = data.digits("train", shuffle=False, **common), data.digits("validation", **common)
    elif os.path.isdir(str(source)):
        split = {"validation_split": FOLDER_SPLIT, "seed": 0, "directory": source, "class_names": None}
        _check_splittable(source)
        try:
            if class_names:
                try:
                    found = set(list_image_folder(source)[2])
                except ValueError:  # from_directory below says what is wrong with the folder, as ever
                    found = set()
                split["class_names"] = next((list(names) for names in class_names
                                             if names is not None and found and found < set(map(str, names))), None)
            calibration = data.from_directory(subset="training", shuffle=False, **split, **common)
            held_out = data.from_directory(subset="validation", **split, **common)
        except ValueError as e:  # e.g. a corrupt or unreadable file, named by keras_vit.data
            raise ValueError(f"calibration_data={str(source)!r} (--calibration-data): {e}") from None
    elif isinstance(source, str) and _is_tfds_name(source):
        calibration = data.from_tfds(source, split="train", **common)
        held_out = data.from_tfds(source, split="test", **common)
    else:
        raise ValueError(
            f"calibration_data={source!r} (--calibration-data): neither an existing folder nor a data set TFDS knows; "
            "give 'digits', an existing image folder or a TFDS name"
        )
    cal = _take(calibration, max_samples)[0]
    eval_images, eval_labels = _take(held_out, max_samples)
    if len(cal) == 0 or len(eval_images) == 0:
        raise ValueError(f"the data source {source!r} yielded no images")
    return cal, eval_images, eval_labels, held_out.class_names


def _check_splittable(source):
    """Refuses, before any image is decoded, a folder the export's fixed split cannot use, saying what it holds.

    The folder is listed and split by `keras_vit.data.image_folder` (what `keras_vit.data.from_directory` uses), so
    the counts are the pipeline's own.

    Args:
        source: str, an existing folder (`--calibration-data`).

    Raises:
        ValueError: naming `--calibration-data` and the folder, for images that lie in the folder itself (not in
            class sub-folders), no class sub-folders, a class folder without images keras_vit reads (what it
            holds), and a split that leaves no verification image (the count of each class). Other faults
            (unreadable files) are left to `keras_vit.data.from_directory`.
    """
    from keras_vit.data.image_folder import IMAGE_EXTENSIONS, class_folders, count_images, list_image_folder, stratified_split

    flag = f"calibration_data={str(source)!r} (--calibration-data)"
    loose = sorted(f for f in os.listdir(source) if f.lower().endswith(IMAGE_EXTENSIONS))
    if loose and count_images(source) == 0:
        raise ValueError(
            f"{flag}: its {len(loose)} image{'s lie' if len(loose) > 1 else ' lies'} in the folder itself; images are "
            "read from one sub-folder per class, named as the model's classes (e.g. "
            f"{os.path.join(str(source), '<class name>', loose[0])})")
    if not class_folders(source):
        raise ValueError(f"{flag}: no class sub-folders (one sub-folder per class, named as the model's classes, "
                         f"holding its images: {', '.join(IMAGE_EXTENSIONS)})")
    try:
        paths, labels, names = list_image_folder(source)
    except ValueError as e:  # a class folder without images keras_vit reads, named with what it holds
        raise ValueError(f"{flag}: {e}") from None
    held_out = sum(stratified_split(labels, FOLDER_SPLIT, names, source))
    least = math.ceil(1 / FOLDER_SPLIT)  # keras_vit.data.from_directory's refusal of a split of the whole
    if held_out == 0 or len(paths) < least:
        counts = collections.Counter(labels)
        each = ", ".join(f"{names[k]}: {counts[k]}" for k in sorted(counts))
        why = (f"the split needs {least} images in all" if held_out else
               f"no class has the {math.ceil(0.5 / FOLDER_SPLIT)} images that hold one out")
        raise ValueError(
            f"{flag}: an image folder is split into calibration images and verification images ({FOLDER_SPLIT:.0%} of "
            f"each class, rounded; the split is fixed), and its {len(paths)} image{'s' if len(paths) > 1 else ''} "
            f"({each}) cannot be: {why}. Add images: {least} in all, and {math.ceil(0.5 / FOLDER_SPLIT)} in a class for "
            "one of that class to be verified")


def _is_tfds_name(name):
    """True if TFDS has a builder of that name (its config and version suffixes ignored)."""
    import tensorflow_datasets as tfds

    return name.split(":")[0].split("/")[0] in tfds.list_builders()


def _take_elements(dataset, limit):
    """Images (float32) and labels (or None) of the first `limit` examples of any dataset layout."""
    images, labels, count = [], [], 0
    for element in dataset:
        batch = np.asarray(_images_of(element), dtype="float32")
        label = element.get("label") if isinstance(element, dict) else (
            element[1] if isinstance(element, (tuple, list)) and len(element) > 1 else None)
        if batch.ndim == 3:
            batch, label = batch[None], None if label is None else np.asarray(label).reshape(1)
        images.append(batch)
        labels.append(None if label is None else np.asarray(label).reshape(-1))
        count += len(batch)
        if count >= limit:
            break
    if not images:
        return np.zeros((0,), "float32"), None
    labels = None if any(label is None for label in labels) else np.concatenate(labels)[:limit]
    return np.concatenate(images)[:limit], labels


def _take(dataset, limit):
    images, labels, count = [], [], 0
    for x, y in dataset:
        images.append(x.numpy())
        labels.append(y.numpy())
        count += len(x)
        if count >= limit:
            break
    if not images:
        return np.zeros((0,)), np.zeros((0,), "int32")
    return np.concatenate(images)[:limit], np.concatenate(labels)[:limit]


def representative_samples(data, shape, include_preprocessing=False, max_samples=DEFAULT_CALIBRATION_STEPS,
                           input_range=None):
    """Returns up to `max_samples` calibration images as float32 `(n, *shape)`.

    Args:
        data: a `tf.data.Dataset` (batched or not; elements `(images,
            labels)`, images, or TFDS's dicts `{"image": ..., "label": ...}`),
            a NumPy array `(n, height, width, channels)`, or the
            path of an image folder (one sub-folder per class, read through
            `keras_vit.data.from_directory`). Images must be scaled as the
            artifact's input expects: [-1, 1], or [0, 255] with
            `include_preprocessing=True` or for a model that takes raw pixels
            (an image folder is scaled for you).
        shape: (height, width, channels) of the model input.
        input_range: None, or the `(lo, hi)` range the artifact's input takes,
            which an image folder is scaled to (default: [0, 255] with
            `include_preprocessing`, else [-1, 1]).

    Raises:
        ValueError: no images, images of another shape, values that are not
            numbers or not finite (NaN, Inf), values plainly in another
            range than the input takes (`export.input_range.check_images_range`:
            raw [0, 255] pixels for a [-1, 1] input, or the reverse), or
            dataset elements of another layout (the message names the keys
            expected).
    """
    import tensorflow as tf

    if isinstance(data, (str, os.PathLike)):
        from keras_vit import data as kv_data

        data = kv_data.from_directory(data, image_size=shape[:2], channels=shape[2], batch_size=32)
        target = tuple(input_range) if input_range is not None else (PIXELS if include_preprocessing else UNIT)
        if target != UNIT:
            data = data.map(lambda x, y: (scale(x, UNIT, target), y))
    if isinstance(data, tf.data.Dataset):
        chunks, count = [], 0
        for element in data:
            images = _as_float_images(_images_of(element))
            if images.ndim == len(shape):
                images = images[None]
            chunks.append(images)
            count += len(images)
            if count >= max_samples:
                break
        samples = np.concatenate(chunks) if chunks else np.zeros((0, *shape), "float32")
    else:
        samples = _as_float_images(data)
        if samples.ndim == len(shape):
            samples = samples[None]
    samples = samples[:max_samples]
    if len(samples) == 0:
        raise ValueError("the representative (calibration) data set is empty; int8 calibration needs images")
    if not np.isfinite(samples).all():  # LiteRT aborts the process on a NaN range (int16x8), with no message
        raise ValueError(f"`representative_data` must hold finite pixel values. Received: "
                         f"{int((~np.isfinite(samples)).sum())} NaN or Inf values in {len(samples)} images")
    if samples.shape[1:] != tuple(shape):
        raise ValueError(
            f"calibration images must have shape (n, {', '.join(map(str, shape))}). "
            f"Received: images of shape {samples.shape}"
        )
    check_images_range(samples, tuple(input_range) if input_range is not None else (PIXELS if include_preprocessing else UNIT))
    return samples


def _as_float_images(images):
    """`images` as a float32 array; a ValueError naming `representative_data` for what is not numeric."""
    try:
        return np.asarray(images, dtype="float32")
    except (TypeError, ValueError) as e:
        raise ValueError(f"`representative_data` must be numeric images (n, height, width, channels). "
                         f"Received: {type(images).__name__} that NumPy cannot turn into float32: {e}") from None


def _images_of(element):
    """The images of one dataset element: `(images, labels)`, images, or a TFDS dict with key "image"."""
    if isinstance(element, dict):
        if "image" not in element:
            raise ValueError(
                "dataset elements that are dicts must hold the images under the key 'image' (TFDS's layout, "
                f"{{'image': ..., 'label': ...}}). Received: a dict with keys {sorted(element)}"
            )
        return element["image"]
    return element[0] if isinstance(element, (tuple, list)) else element
