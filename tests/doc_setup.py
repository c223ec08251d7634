"""What a guide's reader brings, made for the tests that run the guides' Python blocks (tests/doc_blocks.py).

Each helper stands in for something the reader has and the test machine has not: images, a small model,
published checkpoints (no weight host is reachable here), a Hugging Face file.
"""

import dataclasses
import pathlib

import numpy as np


def images(count=4, side=16, seed=0):
    """`count` random images of `side` x `side` x 3 in [-1, 1], float32 (keras_vit.preprocess_input's range)."""
    return np.random.default_rng(seed).uniform(-1, 1, (count, side, side, 3)).astype("float32")


def labels(count=4, classes=10):
    """`count` integer labels 0, 1, ... (mod `classes`), int32."""
    return (np.arange(count) % classes).astype("int32")


def tiny_vit(side=16, classes=10, **kwargs):
    """A small ViT of 4-pixel patches, 32 wide, 2 layers: what a guide's `model` stands for in a test."""
    import keras_vit

    config = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, input_shape=(side, side, 3),
                  classes=classes)
    return keras_vit.VisionTransformer(**{**config, **kwargs})


def digits_vit(side=16, epochs=20):
    """A small ViT (64 wide, 2 layers) trained for `epochs` on scikit-learn's digits at `side` pixels: a reader's
    trained classifier, confident enough for the int8 bars of `export.verify`."""
    from keras_vit import data, training

    train = data.digits("train", image_size=side, seed=0)
    model = tiny_vit(side=side, hidden_size=64, num_heads=4, mlp_dim=128, classifier_activation=None)
    training.compile_model(model, total_steps=epochs * int(train.cardinality()))
    model.fit(train, epochs=epochs, shuffle=False, verbose=0)
    return model


def publish(*names, folder="published"):
    """Random-weight stand-ins for published checkpoints `names`, served from `folder` by file:// URLs.

    Each file is a model of the registry entry's variant, resolution and head, saved in Google's layout;
    the registry entry (in `keras_vit.weights.CHECKPOINTS`, in place) gets its URL, SHA-256 and size, so
    `weights="imagenet"`, `load_pretrained(model, name)` and their checked download run as they do online.
    """
    import keras_vit
    from keras_vit.weights import registry, save_checkpoint

    folder = pathlib.Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        entry = registry.CHECKPOINTS[name]
        path = folder / (name.replace("/", "--") + ".npz")
        model = getattr(keras_vit, entry.variant)(input_shape=(entry.image_size, entry.image_size, 3),
                                                  classes=entry.classes, classifier_activation=None)
        save_checkpoint(model, path)
        registry.CHECKPOINTS[name] = dataclasses.replace(entry, url=path.as_uri(), sha256=registry.sha256(path),
                                                         size=path.stat().st_size)


def google_npz(path, builder="ViTB16", image_size=224, classes=1000):
    """A Google-layout `.npz` of variant `builder` (random weights) at `path`."""
    import keras_vit
    from keras_vit.weights import save_checkpoint

    model = getattr(keras_vit, builder)(input_shape=(image_size, image_size, 3), classes=classes)
    save_checkpoint(model, path)


def hugging_face_safetensors(path, hidden_size=384, num_layers=12, num_heads=6, mlp_dim=1536, classes=1000):
    """A Hugging Face `ViTForImageClassification` state dict (random weights) as `.safetensors` at `path`."""
    import torch
    import transformers
    from safetensors.torch import save_file

    torch.manual_seed(0)
    config = transformers.ViTConfig(hidden_size=hidden_size, num_hidden_layers=num_layers,
                                    num_attention_heads=num_heads, intermediate_size=mlp_dim, num_labels=classes,
                                    layer_norm_eps=1e-6)
    model = transformers.ViTForImageClassification(config)
    save_file({key: value.contiguous() for key, value in model.state_dict().items()}, str(path))


def exif_photo(model_path, path="photo.jpg", orientation=6):
    """A phone's portrait photo of a held-out digit for `model_path`'s model: its pixels stored sideways and an
    EXIF Orientation tag (6: turn 90 degrees clockwise) that turns them upright, as a JPEG of the model's size.

    The digit is the first of `keras_vit.data.digits`' held-out images whose stored (sideways) pixels the model
    classifies otherwise than the upright picture, so a reader's code that ignores the tag gets another class.
    Returns `(path, the class the model gives the upright picture through keras_vit.data)`.
    """
    import keras
    from PIL import Image

    from keras_vit import data

    model = keras.saving.load_model(model_path)
    side = model.input_shape[1]
    images, _ = next(iter(data.digits("validation", image_size=side, batch_size=64)))
    pixels = np.clip(np.rint((images.numpy() + 1) * 127.5), 0, 255).astype("uint8")
    turns = {6: 1, 8: 3, 3: 2}[orientation]  # np.rot90 turns counter-clockwise: the tag turns it back
    stored = np.rot90(pixels, turns, axes=(1, 2))
    upright_class = model.predict(pixels.astype("float32") / 127.5 - 1, verbose=0).argmax(-1)
    stored_class = model.predict(np.ascontiguousarray(stored).astype("float32") / 127.5 - 1, verbose=0).argmax(-1)
    i = int(np.flatnonzero(upright_class != stored_class)[0])
    tags = Image.Exif()
    tags[0x0112] = orientation
    folder = pathlib.Path(path).resolve().parent / "photo_folder" / "digit"
    folder.mkdir(parents=True, exist_ok=True)
    for target in (path, folder / pathlib.Path(path).name):
        Image.fromarray(np.ascontiguousarray(stored[i])).save(target, quality=95, exif=tags.tobytes())
    (read, _), = data.from_directory(str(folder.parent), image_size=side, batch_size=1)
    return str(path), int(model.predict(read, verbose=0).argmax(-1)[0])
