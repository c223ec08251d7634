"""keras_vit.augmentation through keras_vit.data: RandAugment, random erasing, Mixup and CutMix (issue 26)."""

import numpy as np
import pytest

from keras_vit import augmentation, data

ALL = {"rand_augment": (2, 10), "random_erasing": 0.5, "mixup_alpha": 0.8, "cutmix_alpha": 1.0}


def _digits(**kwargs):
    (x, y), _, names = data.load_digits()
    return data.from_arrays(x[:96], y[:96], image_size=16, batch_size=32, shuffle=True, augment="affine",
                            class_names=names, **kwargs)


def _epoch(ds):
    return [(x.numpy(), y.numpy()) for x, y in ds]


def test_same_seed_same_batches_new_ones_each_epoch_other_seed_others():
    first, again, other = _digits(seed=5, **ALL), _digits(seed=5, **ALL), _digits(seed=6, **ALL)
    a1, a2 = _epoch(first), _epoch(first)
    b1 = _epoch(again)
    for (xa, ya), (xb, yb) in zip(a1, b1):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(a1[0][0], a2[0][0])  # a new epoch, new draws
    assert not np.array_equal(a1[0][0], _epoch(other)[0][0])
    x, y = a1[0]
    assert x.shape == (32, 16, 16, 3) and x.dtype == np.float32 and x.min() >= -1 and x.max() <= 1
    assert y.shape == (32, 10) and y.dtype == np.float32
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)
    assert (y.max(-1) < 0.99).mean() > 0.5  # most labels really are mixed


@pytest.mark.parametrize("mixing", [{"mixup_alpha": 0.8}, {"cutmix_alpha": 1.0}, {"mixup_alpha": 0.4, "cutmix_alpha": 0.5}])
def test_images_and_labels_are_mixed_by_the_same_weights(mixing):
    # Each class's images are one grey level: a mixed image's mean is then the labels' weights times those levels,
    # by area for CutMix and by lambda for Mixup.
    levels = np.linspace(0, 255, 4)
    labels = np.arange(64) % 4
    images = np.broadcast_to(levels[labels][:, None, None, None], (64, 8, 8, 1)).astype("float32")
    ds = data.from_arrays(images, labels, image_size=8, channels=1, batch_size=16, shuffle=True, seed=1,
                          class_names=list("abcd"), **mixing)
    scaled = levels / 127.5 - 1.0
    for x, y in _epoch(ds):
        np.testing.assert_allclose(x.mean(axis=(1, 2, 3)), y @ scaled, atol=2e-5)
        assert y.shape == (16, 4) and np.all(y >= 0)


def test_rand_augment_and_erasing_change_images_within_range():
    (x, y), _, names = data.load_digits()
    plain = data.from_arrays(x[:64], y[:64], image_size=16, batch_size=64, class_names=names)
    strong = data.from_arrays(x[:64], y[:64], image_size=16, batch_size=64, class_names=names, seed=0,
                              rand_augment=(3, 20), random_erasing=1.0)
    (p, labels_plain), (s, labels_strong) = _epoch(plain)[0], _epoch(strong)[0]
    np.testing.assert_array_equal(labels_plain, labels_strong)  # per-image augmentation keeps integer labels
    assert labels_strong.dtype == np.int32 and s.shape == p.shape and s.min() >= -1 and s.max() <= 1
    changed = np.abs(s - p).reshape(64, -1).max(-1) > 0.05
    assert changed.all()  # every image is erased somewhere (probability 1)


def test_erasing_alone_leaves_images_outside_the_rectangle():
    (x, y), _, names = data.load_digits()
    kwargs = {"image_size": 16, "batch_size": 64, "class_names": names}
    p = _epoch(data.from_arrays(x[:64], y[:64], **kwargs))[0][0]
    e = _epoch(data.from_arrays(x[:64], y[:64], seed=2, random_erasing=1.0, **kwargs))[0][0]
    differs = np.abs(e - p).max(-1) > 1e-6
    fraction = differs.reshape(64, -1).mean(-1)
    assert 0 < fraction.mean() < 0.5  # a rectangle of 2% to 33% of the image, the rest untouched


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"rand_augment": (2, 31)}, r"`rand_augment` must be None or \(num_ops, magnitude\).*Received: rand_augment=\(2, 31\)"),
        ({"rand_augment": (0, 10)}, r"num_ops an int in \[1, 11\]"),
        ({"rand_augment": 9}, r"Received: rand_augment=9"),
        ({"random_erasing": 1.5}, r"`random_erasing` must be a probability in \[0, 1\]. Received: random_erasing=1.5"),
        ({"mixup_alpha": -0.1}, r"`mixup_alpha` must be a number in \[0, 10\]"),
        ({"mixup_alpha": float("inf")}, r"`mixup_alpha` must be a number in \[0, 10\] \(0: no Mixup\). Received: mixup_alpha=inf"),
        ({"random_erasing": float("nan")}, r"`random_erasing` must be a probability"),
        ({"rand_augment": {2: 10, 3: 4}}, r"`rand_augment` must be None or \(num_ops, magnitude\)"),
        ({"cutmix_alpha": 2.0}, r"`cutmix_alpha` must be a number in \[0, 1\]"),
    ],
)
def test_out_of_range_arguments_are_named(kwargs, message):
    (x, y), _, names = data.load_digits()
    with pytest.raises(ValueError, match=message):
        data.from_arrays(x[:8], y[:8], image_size=8, class_names=names, **kwargs)


def test_numpy_numbers_are_numbers():
    (x, y), _, names = data.load_digits()
    ds = data.from_arrays(x[:8], y[:8], image_size=8, class_names=names, mixup_alpha=np.float32(0.2),
                          random_erasing=np.float32(0.25), rand_augment=(np.int64(2), np.float32(10)))
    assert next(iter(ds))[1].shape == (8, 10)


def test_a_folder_and_tfds_check_the_ranges_before_reading_anything(tmp_path):
    with pytest.raises(ValueError, match=r"`mixup_alpha` must be a number in \[0, 10\]"):
        data.from_directory(tmp_path, image_size=8, mixup_alpha=-1)  # an empty folder: the range is said first
    with pytest.raises(ValueError, match=r"`cutmix_alpha` must be a number in \[0, 1\]"):
        data.from_tfds("no_such_data_set", split="train", image_size=8, cutmix_alpha=2.0)


def test_mixup_with_one_class_or_without_labels_is_refused():
    images = np.zeros((8, 8, 8, 1), "float32")
    with pytest.raises(ValueError, match=r"`mixup_alpha` mixes the labels of two classes, and the data hold 1 class. Received: mixup_alpha=0.2"):
        data.from_arrays(images, np.zeros(8, int), image_size=8, class_names=["only"], mixup_alpha=0.2)
    with pytest.raises(ValueError, match=r"`cutmix_alpha` mixes the labels of two classes"):
        data.from_arrays(images, np.zeros(8, int), image_size=8, cutmix_alpha=0.5)  # classes from the labels: 1
    with pytest.raises(ValueError, match=r"the images have none \(labels=None\)"):
        data.from_arrays(images, None, image_size=8, mixup_alpha=0.2)


def test_folder_pipeline_mixes_with_its_class_count(tmp_path):
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path)  # two classes of real photos, five each
    ds = data.from_directory(tmp_path, image_size=12, batch_size=10, shuffle=True, seed=0, mixup_alpha=0.5,
                             rand_augment=(1, 5))
    x, y = _epoch(ds)[0]
    assert ds.class_names == ["china", "flower"] and y.shape == (10, 2) and x.shape == (10, 12, 12, 3)
    np.testing.assert_allclose(y.sum(-1), 1.0, rtol=1e-5)


def test_keyed_layers_are_keras_own():
    import keras

    layer = augmentation._keyed(keras.layers.RandAugment, value_range=(0, 255), num_ops=2, factor=0.1)
    assert isinstance(layer, keras.layers.RandAugment) and layer.num_ops == 2
    mix = augmentation.batch_mixing(mixup_alpha=0.2, classes=3)
    assert mix is not None and augmentation.batch_mixing() is None and augmentation.image_augmentation() is None


def test_posterization_follows_the_magnitude():
    assert [augmentation.posterize_bits(m) for m in (0, 9, 10, 15, 20, 30)] == [8, 4, 4, 2, 1, 1]
    layer = augmentation.rand_augment_layer(2, 10)
    ramp = np.tile(np.arange(256, dtype="float32")[None, None, :, None], (1, 1, 1, 3))  # every grey level once
    posterize = layer.random_posterization
    transformation = posterize.get_random_transformation(ramp, training=True, seed=1)
    levels = np.unique(np.asarray(posterize.transform_images(ramp, transformation)))
    assert len(levels) == 16  # 4 bits kept at M = 10 (Keras' own factor of 1/12 would keep 1 bit: 2 levels)


def test_rand_augment_operations_go_both_ways_on_the_papers_scale():
    """Keras' RandAugment gives (0, factor) to layers that read (lower, upper): one-way rotations and shifts."""
    import tensorflow as tf

    layer = augmentation.rand_augment_layer(2, 10)
    image = tf.zeros((16, 16, 3))
    angles, shifts, contrast, brightness = [], [], [], []
    for i in range(300):
        layer._seeds.current = augmentation._KeySeeds(tf.constant([i, 3], tf.int64))
        drawn = layer.get_random_transformation(image, training=True)["transforms"]
        angles.append(float(np.ravel(drawn["random_rotation"]["angle"])[0]))  # degrees
        shifts.append(float(np.ravel(drawn["random_translation"]["translations"])[0]))
        contrast.append(float(np.ravel(drawn["random_contrast"]["contrast_factor"])[0]))
        brightness.append(float(np.ravel(drawn["random_brightness"]["rgb_delta"])[0]))
    assert -30.5 < np.min(angles) < -20 and 20 < np.max(angles) < 30.5  # AutoAugment level 10: +-30 degrees
    assert np.min(shifts) < 0 < np.max(shifts)
    assert np.min(contrast) < 0.5 and np.max(contrast) > 1.5  # 1 +- 0.9
    assert np.min(brightness) < 0 < np.max(brightness)
