"""Which files of an image folder `keras_vit.data.from_directory` reads, and their classes.

The listing is Keras' own (`keras.utils.image_dataset_from_directory`'s `index_directory`, its seeded
shuffle included); the validation split is stratified (`stratified_split`: each class keeps its share in
both subsets, where Keras cuts the shuffled list once), with one more format: WebP, which TensorFlow 2.21 decodes and Keras' list of formats leaves out (a class
folder of .webp files used to be silently empty). A class folder with no file keras_vit reads is
refused, naming it; files whose extension says image but that keras_vit does not read (TIFF, HEIC,
AVIF, ...) are named in one log line (logger "keras_vit.data"), once a process for a folder (its training and
validation subsets are listed apart).
"""

import collections
import contextlib
import io
import logging
import os

from keras.src.utils import dataset_utils  # Keras' listing and split (not public; keras is pinned ~=3.15.1)

IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp")
# Extensions of images in formats TensorFlow does not decode: named when skipped, never silently dropped.
SKIPPED_IMAGE_EXTENSIONS = (".avif", ".dng", ".heic", ".heif", ".ico", ".j2k", ".jfif", ".jp2", ".jxl", ".pbm",
                            ".pgm", ".pnm", ".ppm", ".psd", ".svg", ".tga", ".tif", ".tiff")


_NAMED = set()  # (folder, skipped files) already named in this process


def class_folders(directory):
    """The class sub-folders of `directory`, sorted (the class names, in label order)."""
    return sorted(d for d in os.listdir(directory) if os.path.isdir(os.path.join(directory, d)))


def _files_by_class(directory):
    """{class name: [file names under it, any depth]} for every class sub-folder."""
    found = {}
    for name in class_folders(directory):
        found[name] = [f for _, _, files in os.walk(os.path.join(directory, name)) for f in files]
    return found


def count_images(directory):
    """Number of files keras_vit reads (by extension) in the class sub-folders of `directory`."""
    return sum(f.lower().endswith(IMAGE_EXTENSIONS) for files in _files_by_class(directory).values() for f in files)


def list_image_folder(directory, validation_split=None, subset=None, seed=None, class_names=None):
    """Lists an image folder as `keras.utils.image_dataset_from_directory` does, WebP included.

    Args:
        directory: str, a folder with one sub-folder per class.
        validation_split: None or float in (0, 1).
        subset: with `validation_split`, "training" or "validation".
        seed: int, the seed of the shuffle before the split (used only with `validation_split`).
        class_names: None, or the list of class names in label order (a model's or the training set's): a
            class folder's label is its name's index there, so that a folder that lacks a class (a small
            held-out set) keeps the others' labels; a class folder not in the list is refused. None: the
            sorted class folder names.

    Returns:
        `(paths, labels, class_names)`: the files of `subset` (all of them without a split), in Keras'
        order (its seeded shuffle with a split), their int class indices, and the sorted class folder names.
        The split is stratified (`stratified_split`).

    Raises:
        ValueError: a class folder holds no file of `IMAGE_EXTENSIONS` (naming it and what it holds), the
            split leaves a class with no training file (naming it), or a class folder is not in `class_names`.
    """
    by_class = _files_by_class(directory)
    empty = [name for name, files in by_class.items() if not any(f.lower().endswith(IMAGE_EXTENSIONS) for f in files)]
    if empty:
        def holds(name):
            files = by_class[name]
            kinds = collections.Counter(os.path.splitext(f)[1].lower() or "(no extension)" for f in files)
            return "nothing" if not files else ", ".join(f"{n} {ext}" for ext, n in sorted(kinds.items()))
        raise ValueError(
            f"`directory`'s class folder{'s' if len(empty) > 1 else ''} "
            + ", ".join(f"{name!r} (it holds {holds(name)})" for name in empty)
            + f" {'hold' if len(empty) > 1 else 'holds'} no image keras_vit reads ({', '.join(IMAGE_EXTENSIONS)}); "
            f"convert the images (e.g. to PNG) or remove the folder. Received: directory={directory!r}"
        )
    skipped = sorted(os.path.join(name, f) for name, files in by_class.items() for f in files
                     if f.lower().endswith(SKIPPED_IMAGE_EXTENSIONS))
    if skipped and (os.path.abspath(directory), tuple(skipped)) not in _NAMED:  # once a folder, not once a subset
        _NAMED.add((os.path.abspath(directory), tuple(skipped)))
        logging.getLogger("keras_vit.data").warning(
            "%s: %d image file%s in a format keras_vit does not read (it reads %s) %s left out: %s%s",
            directory, len(skipped), "s" if len(skipped) > 1 else "", ", ".join(IMAGE_EXTENSIONS),
            "are" if len(skipped) > 1 else "is", ", ".join(skipped[:5]), ", ..." if len(skipped) > 5 else "")
    # Keras prints "Using N files." on some paths whatever `verbose` says: the caller's output stays its own.
    with contextlib.redirect_stdout(io.StringIO()):
        paths, labels, found = dataset_utils.index_directory(
            directory, "inferred", formats=IMAGE_EXTENSIONS, shuffle=bool(validation_split), seed=seed, verbose=False)
    paths, labels, found = list(paths), [int(label) for label in labels], list(found)
    if class_names is None:
        class_names = found
    else:
        class_names = [str(name) for name in class_names]
        unknown = [name for name in found if name not in class_names]
        if unknown:
            raise ValueError(
                f"`directory`'s class folder{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                f"{'are' if len(unknown) > 1 else 'is'} not in `class_names` ({len(class_names)} names: "
                f"{', '.join(map(repr, class_names[:12]))}{', ...' if len(class_names) > 12 else ''}); rename or remove "
                f"the folder, or pass the model's own class names. Received: directory={directory!r}"
            )
        labels = [class_names.index(found[label]) for label in labels]
    if validation_split:
        held_out = stratified_split(labels, validation_split, class_names, directory)
        chosen = [i for i in range(len(paths)) if held_out[i] == (subset == "validation")]
        paths, labels = [paths[i] for i in chosen], [labels[i] for i in chosen]
    return paths, labels, class_names


def stratified_split(labels, validation_split, class_names, directory):
    """Which files are held out: `validation_split * n` (rounded half up) of each class's n files, the first of
    its files in the listing's seeded shuffle (`index_directory(shuffle=True, seed=...)`), so that every class
    keeps its share in both subsets. Keras' own split (`get_training_or_validation_split`) cuts the shuffled list once, so a class
    with one or two files can land wholly in the held-out part and train a head for a class it never saw.

    Returns a list of bool, one per file. Raises ValueError naming each class left with no training file.
    """
    by_class = collections.defaultdict(list)
    for i, label in enumerate(labels):
        by_class[label].append(i)
    held_out = [False] * len(labels)
    starved = []
    for label, files in sorted(by_class.items()):
        count = int(validation_split * len(files) + 0.5)  # rounded half up (Python's round(0.5) is 0)
        if count >= len(files):
            starved.append(f"{class_names[label]!r} ({len(files)} file{'s' if len(files) > 1 else ''})")
        for i in files[:count]:
            held_out[i] = True
    if starved:
        raise ValueError(
            f"validation_split={validation_split} holds out every file of class folder{'s' if len(starved) > 1 else ''} "
            f"{', '.join(starved)}, which would leave no training image of {'them' if len(starved) > 1 else 'it'}; "
            f"add images or lower validation_split. Received: directory={directory!r}"
        )
    return held_out
