"""The AugReg and DeiT augmentations, made of Keras' own layers and seeded like the rest of the pipeline.

Per image, in pixels [0, 255], after the geometric `augment` of
`keras_vit.data` ("crop", "affine", ...):

- RandAugment (Cubuk et al. 2020, arXiv:1909.13719): `num_ops` operations,
  each drawn from Keras' 11 (shear, translation, rotation, brightness, colour
  degeneration, contrast, sharpness, posterization, solarization, auto
  contrast, equalization), by `keras.layers.RandAugment`.
- Random erasing (Zhong et al. 2020, arXiv:1708.04896): with probability p,
  one rectangle of 2% to 33% of the image filled with noise, by
  `keras.layers.RandomErasing` (its fill, normal noise times 255, is
  clipped to [0, 255]).

Per batch, on the batch's one-hot labels (`classes` columns), after the
scaling to [-1, 1] (both mixes are linear, so the range does not matter):

- Mixup (Zhang et al. 2018, arXiv:1710.09412) by `keras.layers.MixUp`:
  each image and its label blended with another of the batch, weight
  lambda ~ Beta(alpha, alpha), one lambda per image.
- CutMix (Yun et al. 2019, arXiv:1905.04899) by `keras.layers.CutMix`: a
  rectangle pasted from another image of the batch, the labels mixed by the
  share of pixels pasted (timm's `correct_lam`; Keras' own weight is the
  area of a box with fractional corners, which differs on small images).
- Both given: each batch gets one of the two, chosen with probability 1/2
  (DeiT's `mixup_switch_prob` 0.5, timm's `Mixup`).

Magnitudes: RandAugment's `magnitude` is the RandAugment paper's M, on the
scale on which AugReg's `randaug(2, 10)` / `randaug(2, 15)` /
`randaug(2, 20)` and DeiT's `rand-m9` are written (10 = the largest
distortion of AutoAugment's table), in [0, 30]. Keras' layer takes one
`factor` for all its operations and gives most of them a one-sided range
(Keras 3.15; docs/traps.md); here its operations get the symmetric ranges
of AutoAugment's table at level M / 10: rotations of up to +-30 degrees,
shears of 0.3, translations of 45% of the side at M = 10
(`rand_augment_layer` has the whole list), and posterization keeps
`posterize_bits(M)` bits, 4 at M = 10.

Seeds: Keras' layers draw from a `keras.random.SeedGenerator`, a variable
that each call advances. In a parallel `tf.data` map the calls run in no
fixed order, so the same seed would not give the same images. Here each
layer draws instead from a key that the pipeline's seeded random stream
gives each image and each batch (`tf.data.Dataset.random`, new keys every
epoch): the same seed gives the same batches, in any map order, and a
resumed run replays them (`keras-vit-train`'s backup). This is the seeding
of `keras_vit.data`'s geometric augmentation too.

All of it runs inside the tf.data pipeline on TensorFlow ops, whatever the
Keras backend (Keras' preprocessing layers switch to TensorFlow there), so
the model and its XLA-compiled train step are untouched.
"""

from keras_vit.common.backend import tensorflow

tf = tensorflow("keras_vit.augmentation (tf.data augmentation)")

import functools  # noqa: E402
import math  # noqa: E402
import numbers  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.common.validation import is_int  # noqa: E402

GEOMETRIC = (None, "crop", "crop_flip", "affine")
MAX_MAGNITUDE = 30
MAGNITUDE_TO_FACTOR = 1.0 / 120.0  # M = 10 -> Keras factor 1/12 of a turn: rotations of up to 30 degrees
MAX_OPS = 11  # the operations of keras.layers.RandAugment
SWITCH_PROBABILITY = 0.5  # with both Mixup and CutMix: the chance that a batch gets CutMix (timm's switch_prob)


MAX_MIXUP_ALPHA = 10.0  # Beta(alpha, alpha) is a near-constant 1/2 long before; huge values overflow to NaN


def check_augmentation(*, rand_augment=None, random_erasing=0.0, mixup_alpha=0.0, cutmix_alpha=0.0, classes=None):
    """Checks the augmentation arguments of `keras_vit.data`'s pipelines; returns `rand_augment` as a tuple or None.

    Args:
        rand_augment: None (off) or `(num_ops, magnitude)`: num_ops an int
            in [1, 11], magnitude a number in [0, 30] (module doc).
        random_erasing: float in [0, 1], the probability of erasing a
            rectangle of an image; 0 (default) is off.
        mixup_alpha: float in [0, 10], Mixup's Beta(alpha, alpha); 0
            (default) is off (the papers use 0.2 to 0.8).
        cutmix_alpha: float in [0, 1], CutMix's Beta(alpha, alpha); 0
            (default) is off. Keras' `CutMix` takes no alpha above 1 (its
            `factor` bounds); DeiT's is 1.
        classes: None (not known yet: the ranges only are checked) or the
            int number of classes; Mixup and CutMix need at least 2.

    Returns:
        `(num_ops, magnitude)` or None.

    Raises:
        ValueError: an argument out of its range (NaN and infinity too),
            or Mixup / CutMix with fewer than two classes; the message
            names the argument.
    """
    if rand_augment is not None:
        try:
            num_ops, magnitude = rand_augment if isinstance(rand_augment, (tuple, list)) else (None, None)
        except ValueError:
            num_ops = magnitude = None
        if not (is_int(num_ops) and 1 <= num_ops <= MAX_OPS and _is_number(magnitude)
                and 0 <= magnitude <= MAX_MAGNITUDE):
            raise ValueError(
                f"`rand_augment` must be None or (num_ops, magnitude), num_ops an int in [1, {MAX_OPS}] and magnitude "
                f"a number in [0, {MAX_MAGNITUDE}] (RandAugment's M; AugReg uses (2, 10) to (2, 20)). "
                f"Received: rand_augment={rand_augment!r}"
            )
        rand_augment = (int(num_ops), float(magnitude))
    if not (_is_number(random_erasing) and 0 <= random_erasing <= 1):
        raise ValueError(f"`random_erasing` must be a probability in [0, 1]. Received: random_erasing={random_erasing!r}")
    if not (_is_number(mixup_alpha) and 0 <= mixup_alpha <= MAX_MIXUP_ALPHA):
        raise ValueError(f"`mixup_alpha` must be a number in [0, {MAX_MIXUP_ALPHA:g}] (0: no Mixup). "
                         f"Received: mixup_alpha={mixup_alpha!r}")
    if not (_is_number(cutmix_alpha) and 0 <= cutmix_alpha <= 1):
        raise ValueError(
            f"`cutmix_alpha` must be a number in [0, 1] (0: no CutMix). Received: cutmix_alpha={cutmix_alpha!r}"
        )
    for name, alpha in (("mixup_alpha", mixup_alpha), ("cutmix_alpha", cutmix_alpha)):
        if alpha and classes is not None and classes < 2:
            raise ValueError(
                f"`{name}` mixes the labels of two classes, and the data hold {classes} "
                f"class{'' if classes == 1 else 'es'}. Received: {name}={alpha!r}"
            )
    return rand_augment


def _is_number(value):
    """A finite real number (Python's or NumPy's), not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)


class _KeySeeds(keras.random.SeedGenerator):
    """A `SeedGenerator` whose draws are stateless: the n-th `next()` is `stateless_fold_in(key, n)`.

    Keras' random ops take a `SeedGenerator` (or an int) as `seed`; this one
    holds no variable, so every draw is a function of the key alone.
    """

    def __init__(self, key):  # no super().__init__: it would make the state variable this class replaces
        self.name = "key_seeds"
        self._key = tf.cast(key, tf.int64)
        self._draws = 0

    def next(self, ordered=True):
        self._draws += 1
        return tf.random.experimental.stateless_fold_in(self._key, self._draws)


class _Seeds:
    """Holds the `_KeySeeds` of the call being traced (a plain object: Keras tracks no state in it)."""

    current = None


def _keyed(layer_class, base=None, **kwargs):
    """An instance of a subclass of Keras' `layer_class` (and of `base`, if given, first) that draws from
    `layer._seeds.current` (set per call)."""

    class Keyed(*((base,) if base else ()), layer_class):
        def _get_seed_generator(self, backend=None):
            return self._seeds.current

    Keyed.__name__ = Keyed.__qualname__ = "Keyed" + layer_class.__name__
    layer = Keyed.__new__(Keyed)
    layer._seeds = _Seeds()  # before __init__: after it, Keras' attribute tracking is locked
    layer.__init__(**kwargs)
    return layer


class _ChosenOperationsOnly:
    """Runs only the operations RandAugment drew for an image (`tf.switch_case`), not all of them.

    Keras 3.15's `RandAugment.transform_images` computes every one of its 11
    operations on the image and keeps the drawn ones with `where`: 5x the
    work of the image's own two (equalization and sharpness are the dear
    ones), which made a 16 px digits epoch 5x slower than without it. The
    operations, their parameters and the draws are Keras' own.
    """

    def transform_images(self, images, transformation, training=True):
        images = self.backend.cast(images, self.compute_dtype)
        if not training:
            return images
        names = list(transformation["transforms"])
        for i in range(self.num_ops):
            def branch(name, images=images):
                out = getattr(self, name).transform_images(images, transformation["transforms"][name])
                return tf.ensure_shape(tf.cast(out, self.compute_dtype), images.shape)

            chosen = tf.cast(tf.reshape(transformation["layer_idxes"][i], []), tf.int32)
            images = tf.switch_case(chosen, [functools.partial(branch, name) for name in names])
        return images


class _CutMixLabelsByArea:
    """Mixes CutMix's labels by the share of pixels really pasted (timm's `correct_lam`).

    Keras 3.15's `CutMix` mixes them by the area of its box with fractional
    corners, `(x1 - x0) * (y1 - y0)`, while it pastes the whole pixels whose
    centres fall inside: on a 16 x 16 image the two differ by up to a fifth
    of the weight (docs/traps.md). Here the weight is the pasted share of its
    mask, so that images and labels agree exactly.
    """

    def transform_labels(self, labels, transformation, training=True):
        if not training or transformation is None:
            return labels
        masks = tf.cast(transformation["batch_masks"], tf.float32)
        pasted = tf.reduce_mean(masks, axis=[1, 2, 3])[:, None]
        others = tf.gather(labels, transformation["permutation_order"], axis=0)
        return (1.0 - pasted) * labels + pasted * others


def _call(layer, inputs, key):
    layer._seeds.current = _KeySeeds(key)
    return layer(inputs, training=True)


def geometric(image, augment, key, height, width, channels):
    """Stateless geometric augmentation of one `(height, width, channels)` image in [0, 255], seeded by `key`.

    "crop": resized to 1.125x, cropped back at random; "crop_flip": the same
    and a random horizontal flip; "affine": a random rotation of up to
    +-10.8 degrees and zoom in [0.9, 1.1] about the centre, then "crop".
    TensorFlow ops only: tf.data traces this as a TensorFlow graph whatever
    the Keras backend is (`keras.ops` would be JAX's or PyTorch's there and
    fail on symbolic TensorFlow tensors).
    """
    seeds = tf.random.experimental.stateless_split(key, num=4)
    if augment == "affine":
        # Rotation up to +-0.03 turns (10.8 degrees) and zoom in [0.9, 1.1] about the centre.
        angle = tf.random.stateless_uniform((), seeds[0], -0.03, 0.03) * 2.0 * np.pi
        scale = tf.random.stateless_uniform((), seeds[1], 0.9, 1.1)
        cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
        a0, a1 = scale * tf.cos(angle), -scale * tf.sin(angle)
        b0, b1 = scale * tf.sin(angle), scale * tf.cos(angle)
        transform = tf.stack([a0, a1, cx - a0 * cx - a1 * cy, b0, b1, cy - b0 * cx - b1 * cy, 0.0, 0.0])
        # The op keras.ops.image.affine_transform runs on the TensorFlow backend, with its arguments.
        image = tf.raw_ops.ImageProjectiveTransformV3(
            images=image[None], transforms=tf.cast(transform, tf.float32)[None], output_shape=[height, width],
            fill_value=0.0, interpolation="BILINEAR", fill_mode="CONSTANT",
        )[0]
    pad_h, pad_w = int(round(height * 1.125)), int(round(width * 1.125))
    image = tf.image.resize(image, (pad_h, pad_w), method="bilinear")
    image = tf.image.stateless_random_crop(image, (height, width, channels), seed=seeds[2])
    if augment == "crop_flip":
        image = tf.image.stateless_random_flip_left_right(image, seed=seeds[3])
    return image


def posterize_bits(magnitude):
    """Bits RandAugment's posterization keeps at `magnitude` M: 8 - round(4 M / 10), at least 1.

    The papers' scale: 4 bits at M = 10, as AutoAugment's table and timm's
    `rand-m10` (8 bits, no change, at M = 0; 1 bit from M = 18).
    """
    return int(min(8, max(1, 8 - round(4 * magnitude / 10))))


def rand_augment_layer(num_ops, magnitude):
    """Keras' `RandAugment` for pixels in [0, 255] at RandAugment's magnitude M, drawing from per-call keys.

    Keras 3.15's `RandAugment` gives its geometric and colour operations the
    pair `(0, factor)`, which `RandomRotation`, `RandomTranslation`,
    `RandomShear`, `RandomBrightness` and `RandomContrast` read as (lower,
    upper): rotations only one way, translations only down and right,
    brightness and contrast only up, and all of them on one scale
    (docs/traps.md). Here those sublayers are Keras' own, made with the
    symmetric ranges of AutoAugment's table at level m = M / 10 (its level
    10 is the largest): rotation +-30 m degrees, shear +-0.3 m, translation
    +-0.45 m of the side (at most 1), contrast factor 1 +- 0.9 m (at most
    1 +- 1), brightness +-0.3 m of the range; colour degeneration and
    sharpness blend by up to 0.9 m (at most 1); posterization keeps
    `posterize_bits(M)` bits. Solarization, auto contrast and equalization
    are Keras' (factor M / 120). Each strength is drawn uniformly within its
    range, for each image. Call it through `image_augmentation`, which gives
    it its keys.

    Args:
        num_ops: int in [1, 11].
        magnitude: number in [0, 30].

    Returns:
        A `keras.layers.RandAugment` (a subclass of it).
    """
    layer = _keyed(keras.layers.RandAugment, base=_ChosenOperationsOnly, value_range=(0, 255), num_ops=num_ops,
                   factor=magnitude * MAGNITUDE_TO_FACTOR)
    level = magnitude / 10.0
    pixels = {"value_range": (0, 255)}
    geometry = {"interpolation": "bilinear"}
    # Set before the layer is built (Keras' tracking allows it until then); each is a Keras layer, made as a user
    # of that layer would make it (a single factor: a symmetric range).
    layer.random_rotation = keras.layers.RandomRotation(factor=30.0 * level / 360.0, **geometry)
    layer.random_shear = keras.layers.RandomShear(x_factor=min(1.0, 0.3 * level), y_factor=min(1.0, 0.3 * level),
                                                  **geometry)
    layer.random_translation = keras.layers.RandomTranslation(height_factor=min(1.0, 0.45 * level),
                                                              width_factor=min(1.0, 0.45 * level), **geometry)
    contrast = min(1.0, 0.9 * level)  # as a pair: Keras reads a single contrast factor f as [1, 1 + f]
    layer.random_contrast = keras.layers.RandomContrast(factor=(contrast, contrast), **pixels)
    layer.random_brightness = keras.layers.RandomBrightness(factor=min(1.0, 0.3 * level), **pixels)
    layer.random_color_degeneration = keras.layers.RandomColorDegeneration(factor=(0.0, min(1.0, 0.9 * level)),
                                                                           **pixels)
    layer.random_sharpness = keras.layers.RandomSharpness(factor=(0.0, min(1.0, 0.9 * level)), **pixels)
    # Keras keeps max(1, int(8 x factor)) bits: 1 bit (the hardest) for every factor below 1/4 (docs/traps.md).
    bits = posterize_bits(magnitude)
    layer.random_posterization = keras.layers.RandomPosterization(factor=(bits, bits), **pixels)
    return layer


def image_augmentation(rand_augment=None, random_erasing=0.0):
    """The per-image augmentation: `fn(image, key)`, or None when both are off.

    Args:
        rand_augment: None or `(num_ops, magnitude)`, checked as in
            `check_augmentation`.
        random_erasing: float in [0, 1], the erasing probability.

    Returns:
        None, or a function of a float32 image `(height, width, channels)`
        with pixels in [0, 255] and an int64 key `(2,)`, returning the
        augmented image, same shape, dtype and range. TensorFlow ops only
        (it runs in a tf.data map).

    Raises:
        ValueError: as `check_augmentation`.
    """
    rand_augment = check_augmentation(rand_augment=rand_augment, random_erasing=random_erasing)
    layers = []
    if rand_augment is not None:
        num_ops, magnitude = rand_augment
        layers.append(rand_augment_layer(num_ops, magnitude))
    if random_erasing:
        layers.append(_keyed(keras.layers.RandomErasing, factor=(float(random_erasing),) * 2, value_range=(0, 255)))
    if not layers:
        return None

    def augment(image, key):
        keys = tf.random.experimental.stateless_split(key, num=len(layers))
        for i, layer in enumerate(layers):
            image = _call(layer, image, keys[i])
        return tf.clip_by_value(tf.cast(image, tf.float32), 0.0, 255.0)

    return augment


def batch_mixing(mixup_alpha=0.0, cutmix_alpha=0.0, classes=None):
    """The per-batch Mixup / CutMix: `fn(images, labels, key)`, or None when both are off.

    Args:
        mixup_alpha, cutmix_alpha, classes: as in `check_augmentation`.

    Returns:
        None, or a function of float32 images `(batch, height, width,
        channels)`, int32 labels `(batch,)` and an int64 key `(2,)`,
        returning `(images, labels)`: the images mixed (same shape and
        dtype), the labels float32 `(batch, classes)`, one-hot mixed by the
        same weights (each row sums to 1). With both alphas, CutMix for a
        batch with probability 1/2, else Mixup.

    Raises:
        ValueError: as `check_augmentation`.
    """
    check_augmentation(mixup_alpha=mixup_alpha, cutmix_alpha=cutmix_alpha, classes=classes)
    mixup = _keyed(keras.layers.MixUp, alpha=float(mixup_alpha)) if mixup_alpha else None
    cutmix = (_keyed(keras.layers.CutMix, base=_CutMixLabelsByArea, factor=(float(cutmix_alpha),) * 2)
              if cutmix_alpha else None)
    if mixup is None and cutmix is None:
        return None

    def mix(images, labels, key):
        one_hot = tf.one_hot(labels, classes, dtype=tf.float32)
        keys = tf.random.experimental.stateless_split(key, num=3)
        results = [_call(layer, {"images": images, "labels": one_hot}, keys[i])
                   for i, layer in enumerate((mixup, cutmix)) if layer is not None]
        if len(results) == 1:
            mixed = results[0]
            return tf.cast(mixed["images"], images.dtype), tf.cast(mixed["labels"], tf.float32)
        use_cutmix = tf.random.stateless_uniform((), keys[2]) < SWITCH_PROBABILITY
        return (tf.where(use_cutmix, tf.cast(results[1]["images"], images.dtype),
                         tf.cast(results[0]["images"], images.dtype)),
                tf.where(use_cutmix, tf.cast(results[1]["labels"], tf.float32),
                         tf.cast(results[0]["labels"], tf.float32)))

    return mix
