"""tf.data input pipelines for ViT: TFDS, image folders, NumPy arrays, digits.

The loaders and their contract are in `loaders.py` (read its docstring first); `pipeline.py` is the tail
every loader ends in, `image_files.py` checks and decodes files (`exif.py` reads and applies their EXIF
orientation), `image_folder.py` lists and splits a folder, `arrays.py` checks `from_arrays`' arrays,
`subsets.py` draws stratified subsets.
"""

from keras_vit.data.subsets import stratified_subset
from keras_vit.data.loaders import (
    AUGMENTATIONS,
    DIGITS_VALIDATION_FRACTION,
    DIGITS_SPLIT_SEED,
    load_digits,
    digits,
    from_arrays,
    from_directory,
    from_tfds,
)
from keras_vit.data.image_folder import IMAGE_EXTENSIONS
from keras_vit.data.image_files import MAX_PIXELS, read_image  # noqa: F401
