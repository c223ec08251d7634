"""`keras_vit.data.stratified_subset` and `keras-vit-train --labels-fraction` (issue 14: few labels)."""

import collections
import json
import re
from fractions import Fraction

import numpy as np
import pytest

from keras_vit import data, train


def _expected_counts(labels, fraction):
    """Per class, round(fraction x count) with halves up, counted and rounded in exact arithmetic."""
    counts = collections.Counter(int(v) for v in labels)
    kept = {}
    for label, n in counts.items():
        share = Fraction(str(fraction)) * n
        kept[label] = int(share) + (1 if share - int(share) >= Fraction(1, 2) else 0)
    return kept


@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.5, 1.0])
def test_subset_keeps_each_class_share_of_the_digits_labels(fraction):
    (_, labels), _, _ = data.load_digits()
    keep = data.stratified_subset(labels, fraction, seed=3)
    assert keep.dtype == np.int64 and np.all(np.diff(keep) > 0)  # sorted, no index twice
    assert 0 <= keep.min() and keep.max() < len(labels)
    assert dict(collections.Counter(int(v) for v in labels[keep])) == _expected_counts(labels, fraction)
    if fraction == 1.0:
        np.testing.assert_array_equal(keep, np.arange(len(labels)))
    if fraction == 0.1:
        # 1,437 training scans, classes of 142 146 142 146 145 145 145 143 139 144: 14 15 14 15 15 15 15 14 14 14
        # (the three 14.5 round half up, not to even as Python's round(14.5) = 14 would)
        assert len(keep) == 145


def test_subset_is_seeded():
    (_, labels), _, _ = data.load_digits()
    first = data.stratified_subset(labels, 0.1, seed=7)
    np.testing.assert_array_equal(first, data.stratified_subset(labels, 0.1, seed=7))
    other = data.stratified_subset(labels, 0.1, seed=8)
    assert len(other) == len(first) and len(np.intersect1d(first, other)) < len(first) // 2  # ~10% overlap expected


def test_a_class_left_empty_or_a_bad_fraction_is_refused():
    labels = np.array([0] * 20 + [1] * 3)
    with pytest.raises(ValueError, match=r"labels_fraction=0.1 leaves class 'b' with no image: round\(0.1 x 3\) = 0\. "
                                         r"Give labels_fraction >= 0.167"):
        data.stratified_subset(labels, 0.1, class_names=["a", "b"])
    assert len(data.stratified_subset(labels, 0.17)) == 4  # 3.4 -> 3 and 0.51 -> 1
    # the suggestion is the smallest fraction that keeps every class (a review found 0.00352, which emptied another)
    (_, digits_labels), _, _ = data.load_digits()
    with pytest.raises(ValueError, match=r"Give labels_fraction >= 0\.0036 \(every class then keeps an image\)"):
        data.stratified_subset(digits_labels, 0.00352)
    assert np.bincount(digits_labels[data.stratified_subset(digits_labels, 0.0036)]).min() == 1
    assert len(data.stratified_subset(np.zeros(90, "int32"), 0.35)) == 32  # 31.5 up, though float 0.35 x 90 = 31.4999...
    for bad in (0, 0.0, 1.5, -0.1, True, "0.5"):
        with pytest.raises(ValueError, match=r"`labels_fraction` must be a float in \(0, 1\]"):
            data.stratified_subset(labels, bad)
    with pytest.raises(ValueError, match="`labels` must be a 1-D array of class indices >= 0"):
        data.stratified_subset(np.array([0.5, 1.0]), 0.5)


def test_from_arrays_and_from_directory_yield_the_subset(tmp_path):
    from tests.test_data import _write_image_folder

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (30, 4, 4, 1)).astype("float32")
    labels = np.repeat(np.arange(3), 10)
    ds = data.from_arrays(images, labels, image_size=4, channels=1, batch_size=7, seed=5, labels_fraction=0.3)
    got_x, got_y = (np.concatenate(parts) for parts in zip(*[(x.numpy(), y.numpy()) for x, y in ds]))
    keep = data.stratified_subset(labels, 0.3, seed=5)
    assert ds.num_examples == len(keep) == 9
    np.testing.assert_allclose(got_x, (images[keep] - 127.5) / 127.5, atol=1e-6)
    np.testing.assert_array_equal(got_y, labels[keep])

    _write_image_folder(tmp_path / "photos")  # 2 classes of 5 photos
    full = data.from_directory(tmp_path / "photos", image_size=8, labels_fraction=None)
    half = data.from_directory(tmp_path / "photos", image_size=8, labels_fraction=0.5, seed=1)
    assert half.num_examples == 6 and set(half.file_paths) < set(full.file_paths)  # round(2.5) = 3 per class
    assert collections.Counter(int(v) for _, y in half for v in y) == {0: 3, 1: 3}
    with pytest.raises(ValueError, match="labels_fraction=0.05 leaves class 'china' with no image"):
        data.from_directory(tmp_path / "photos", image_size=8, labels_fraction=0.05)


def test_from_tfds_yields_the_subset():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=40):
        full = data.from_tfds("mnist", split="train", image_size=8, batch_size=64)
        labels = np.concatenate([y.numpy() for _, y in full])
        part = data.from_tfds("mnist", split="train", image_size=8, batch_size=64, seed=2, labels_fraction=0.5)
        got = np.concatenate([y.numpy() for _, y in part])
    keep = data.stratified_subset(labels, 0.5, seed=2)
    assert part.num_examples == len(keep) == len(got) and int(part.cardinality()) == 1
    np.testing.assert_array_equal(got, labels[keep])


TINY = ["--image-size", "8", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
        "--mlp-dim", "32", "--epochs", "1", "--warmup-epochs", "0", "--verbose", "0"]


def test_cli_trains_on_the_subset_and_evaluates_on_the_whole_held_out_split(tmp_path):
    out = tmp_path / "run"
    assert train.main([*TINY, "--labels-fraction", "0.1", "--batch-size", "50", "--output-dir", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["labels_fraction"] == 0.1 and metrics["num_train_images"] == 145
    assert metrics["num_heldout_images"] == 360
    history = json.loads((out / "history.json").read_text())
    assert len(history["loss"]) == 1


@pytest.mark.parametrize("fraction,message", [
    ("0", "--labels-fraction must be in (0, 1]. Received: 0.0"),
    ("1.5", "--labels-fraction must be in (0, 1]. Received: 1.5"),
    ("0.1", r"error: --labels-fraction 0.1 leaves class '(china|flower)' with no image"),  # 3-5 photos
])
def test_cli_refuses_a_bad_fraction_before_training(tmp_path, capsys, fraction, message):
    from tests.test_data import _write_image_folder

    _write_image_folder(tmp_path / "photos")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*TINY, "--image-folder", str(tmp_path / "photos"), "--labels-fraction", fraction,
                    "--output-dir", str(tmp_path / "run")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert re.search(message if fraction == "0.1" else re.escape(message), err) and "Traceback" not in err
    assert not (tmp_path / "run").exists()
