"""Masked patch prediction (issue 14; ViT paper Sec. 4.6, Appendix B.1.2): keras_vit.pretraining."""

import math
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import VisionTransformer, data, pretraining

TINY = dict(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32, input_shape=(16, 16, 3))
Z = 5.0  # two-sided tail of 5 standard deviations: ~6e-7 per check, under 1e-4 for all the checks below


def _backbone(**overrides):
    return VisionTransformer(**{**TINY, "include_top": False, **overrides})


def _binomial_bounds(n, p, z=Z):
    """The interval mean +- z standard deviations of a Binomial(n, p) count."""
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return mean - z * sd, mean + z * sd


# --- The corruption rule ---------------------------------------------------------------------------------------


def test_corruption_follows_the_50_percent_and_80_10_10_rule():
    batch, n = 1000, 16
    kinds, sources = [], []
    for s in range(5):  # 5 seeded draws of 1000 images: 80,000 patches
        kind, source = pretraining.corruption(tf.constant([s, 7]), batch, n)
        assert kind.dtype == tf.int32 and source.dtype == tf.int32 and kind.shape == (batch, n)
        kinds.append(kind.numpy())
        sources.append(source.numpy())
    kind, source = np.concatenate(kinds), np.concatenate(sources)
    corrupted = kind > 0
    np.testing.assert_array_equal(corrupted.sum(axis=1), 8)  # exactly 50% of each image's patches
    # Which patches: each position is chosen with probability 1/2, independently of the image.
    low, high = _binomial_bounds(len(kind), 0.5)
    assert np.all((low <= corrupted.sum(axis=0)) & (corrupted.sum(axis=0) <= high)), corrupted.sum(axis=0)
    # How: each corrupted patch is masked / replaced / kept with probability 0.8 / 0.1 / 0.1.
    total = corrupted.sum()
    for value, share in ((1, 0.8), (2, 0.1), (3, 0.1)):
        low, high = _binomial_bounds(total, share)
        assert low <= (kind == value).sum() <= high, (value, (kind == value).sum(), low, high)
    assert set(np.unique(kind)) == {0, 1, 2, 3}
    # Sources: another patch of the same image, uniform over the other 15; the own index otherwise.
    rows, cols = np.nonzero(kind == 2)
    offsets = (source[rows, cols] - cols) % n
    assert offsets.min() >= 1
    low, high = _binomial_bounds(len(offsets), 1 / (n - 1))
    counts = np.bincount(offsets, minlength=n)[1:]
    assert np.all((low <= counts) & (counts <= high)), counts
    own = np.broadcast_to(np.arange(n), kind.shape)
    np.testing.assert_array_equal(source[kind != 2], own[kind != 2])


@pytest.mark.parametrize("rate,n,expected", [(0.5, 16, 8), (0.15, 16, 2), (0.3, 10, 3), (0.5, 5, 3), (0.1, 4, 1)])
def test_corruption_count_is_rate_times_patches_rounded_half_up_at_least_one(rate, n, expected):
    kind, _ = pretraining.corruption(np.array([1, 2]), 64, n, corruption_rate=rate)
    np.testing.assert_array_equal((kind.numpy() > 0).sum(axis=1), expected)


def test_corruption_is_stateless():
    first = pretraining.corruption(np.array([3, 4]), 8, 16)
    again = pretraining.corruption(tf.constant([3, 4], tf.int64), 8, 16)
    other = pretraining.corruption(np.array([3, 5]), 8, 16)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


# --- The targets against NumPy ---------------------------------------------------------------------------------


def _numpy_targets(images, cell, target):
    """Per patch in row-major order, written out with loops: an independent reference."""
    batch, height, width, channels = images.shape
    out = []
    for b in range(batch):
        row = []
        for r in range(height // cell):
            for c in range(width // cell):
                patch = images[b, r * cell:(r + 1) * cell, c * cell:(c + 1) * cell].astype(np.float64)
                if target == "mean_color":
                    levels = [min(int(np.floor((m + 1) / 2 * 8)), 7) for m in patch.mean(axis=(0, 1))]
                    row.append(int("".join(str(level) for level in levels), 8))  # base-8 digits, channel 0 first
                elif target == "downsized":
                    # Area average to 4x4 for any cell: repeat each pixel 4 times (4*cell pixels a side), then
                    # each output pixel is the mean of a cell x cell block.
                    fine = patch.repeat(4, axis=0).repeat(4, axis=1)
                    small = fine.reshape(4, cell, 4, cell, channels).mean(axis=(1, 3))
                    row.append(small.reshape(-1))
                else:
                    row.append(patch.reshape(-1))
        out.append(row)
    return np.array(out)


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("target,cell", [("mean_color", 4), ("downsized", 8), ("downsized", 6), ("full", 4)])
def test_targets_equal_a_numpy_computation(target, cell, channels):
    rng = np.random.default_rng(cell * channels)
    images = rng.uniform(-1, 1, (2, 2 * cell, 3 * cell, channels)).astype("float32")
    # Vary the means across patches (uniform noise alone averages to the middle levels).
    images = np.clip(images * 0.3 + rng.uniform(-0.9, 0.9, (2, 2, 1, 3, 1, channels)).repeat(cell, 2).repeat(cell, 4)
                     .reshape(images.shape), -1, 1).astype("float32")
    got = pretraining.patch_targets(images, cell, target).numpy()
    expected = _numpy_targets(images, cell, target)
    if target == "mean_color":
        assert got.dtype == np.int32 and got.shape == (2, 6)
        np.testing.assert_array_equal(got, expected)
        assert len(np.unique(got)) > 3
    else:
        size = 16 * channels if target == "downsized" else cell * cell * channels
        assert got.dtype == np.float32 and got.shape == (2, 6, size)
        np.testing.assert_allclose(got, expected, atol=1e-6)
    assert pretraining.target_size(target, cell, channels) == (8 ** channels if target == "mean_color" else got.shape[-1])


def test_mean_color_levels_at_known_colours():
    colours = np.array([[-1, -1, -1], [1, 1, 1], [1, -1, -1], [-0.4, 0.0, 0.76]], "float32")  # (m+1)/2*8: 2.4, 4, 7.04
    images = np.zeros((1, 4, 16, 3), "float32")
    for i, colour in enumerate(colours):
        images[0, :, 4 * i:4 * (i + 1)] = colour
    expected = [0, 511, 7 * 64, 2 * 64 + 4 * 8 + 7]
    np.testing.assert_array_equal(pretraining.patch_targets(images, 4).numpy(), [expected])
    grey = pretraining.patch_targets(images[..., :1], 4).numpy()
    np.testing.assert_array_equal(grey, [[0, 7, 7, 2]])


def test_full_target_is_the_backbones_patch_flattening():
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    backbone = _backbone()
    patches = keras.Model(backbone.inputs[0], backbone.get_layer("patches").output)
    np.testing.assert_array_equal(pretraining.patch_targets(images, 4, "full"), patches(images))


# --- The model -------------------------------------------------------------------------------------------------


def _encoder_output(backbone, images):
    features = keras.Model(backbone.inputs[0], backbone.get_layer("encoder_norm").output)(images)
    return features[:, 1:] if backbone.get_layer("patch_encoder").class_token else features


@pytest.mark.parametrize("overrides", [{}, {"classifier": "gap", "include_top": True, "classes": 3}])
def test_uncorrupted_forward_is_the_backbones_own_computation(overrides):
    backbone = _backbone(**overrides)
    model = pretraining.MaskedPatchPrediction(backbone)
    images = np.random.default_rng(1).uniform(-1, 1, (3, 16, 16, 3)).astype("float32")
    none = np.zeros((3, 16), "int32")
    own = np.broadcast_to(np.arange(16, dtype="int32"), (3, 16))
    expected = _encoder_output(backbone, images)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for inputs in ({"images": images}, {"images": images, "corruption": none, "source": own},
                       {"images": images, "corruption": none + 3, "source": own}):  # kind 3: corrupted, left as it is
            np.testing.assert_allclose(model.patch_representations(inputs), expected, atol=1e-6)
    assert not [str(w.message) for w in caught]  # e.g. Keras' "structure of `inputs` doesn't match" on every call
    assert model({"images": images}).shape == (3, 16, 512)


def test_replacing_and_masking_act_on_the_projected_patch_tokens():
    """Kind 2 equals pasting the source patch's pixels there; kind 1 equals a patch whose projection is [mask]."""
    backbone = _backbone()
    model = pretraining.MaskedPatchPrediction(backbone)
    rng = np.random.default_rng(2)
    images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    kind = np.zeros((2, 16), "int32")
    source = np.broadcast_to(np.arange(16, dtype="int32"), (2, 16)).copy()
    kind[0, 5], source[0, 5] = 2, 14  # patch (1, 1) of image 0 gets the embedding of patch (3, 2)
    pasted = images.copy()
    pasted[0, 4:8, 4:8] = images[0, 12:16, 8:12]
    got = model.patch_representations({"images": images, "corruption": kind, "source": source})
    np.testing.assert_allclose(got, _encoder_output(backbone, pasted), atol=1e-5)

    # [mask] := the projection of a chosen patch P: a masked patch then reads like an image with P there.
    patch = rng.uniform(-1, 1, (4, 4, 3)).astype("float32")
    projection = backbone.get_layer("patch_encoder").projection
    model.mask_embedding.assign(projection(patch.reshape(1, 1, 48))[0, 0])
    kind[:] = 0
    kind[1, 0] = 1
    drawn = images.copy()
    drawn[1, 0:4, 0:4] = patch
    got = model.patch_representations({"images": images, "corruption": kind, "source": source})
    np.testing.assert_allclose(got, _encoder_output(backbone, drawn), atol=1e-5)
    assert np.abs(got[1, 0] - _encoder_output(backbone, images)[1, 0]).max() > 1e-2  # the mask changed something


@pytest.mark.parametrize(
    "overrides,cell",
    [
        ({"position_embedding": "learned"}, 4),
        ({"position_embedding": "learned_2d"}, 4),
        ({"position_embedding": "sincos_2d"}, 4),
        ({"position_embedding": "none", "classifier": "gap"}, 4),
        ({"patch_size": 1, "resnet_num_layers": (1, 1)}, 8),  # hybrid, ResNet stride 8
        ({"input_shape": (None, None, 3), "position_embedding": "learned_2d"}, 4),  # any resolution
        ({"input_shape": (None, None, 1), "patch_size": 1, "resnet_num_layers": (1, 1)}, 8),  # both, grey
    ],
)
@pytest.mark.parametrize("target", pretraining.TARGETS)
def test_every_kind_of_backbone_builds_and_runs(overrides, cell, target):
    backbone = _backbone(**overrides)
    model = pretraining.MaskedPatchPrediction(backbone, target=target)
    channels = backbone.input_shape[-1]
    assert pretraining.backbone_cell_size(backbone) == cell == model.cell_size
    sizes = [(16, 16)] if backbone.input_shape[1] else [(16, 16), (8, 24)]
    for height, width in sizes:
        n = (height // cell) * (width // cell)
        images = np.random.default_rng(3).uniform(-1, 1, (2, height, width, channels)).astype("float32")
        kind, source = pretraining.corruption(np.array([0, 1]), 2, n)
        out = model({"images": images, "corruption": kind, "source": source})
        assert out.shape == (2, n, pretraining.target_size(target, cell, channels)) and out.dtype == "float32"
        assert np.all(np.isfinite(out))
        assert pretraining.patch_targets(images, cell, target).shape[:2] == (2, n)


def test_mixed_precision_head_is_float32_and_mask_is_a_float32_variable(policy):
    policy("mixed_bfloat16")
    model = pretraining.MaskedPatchPrediction(_backbone())
    kind, source = pretraining.corruption(np.array([0, 1]), 2, 16)
    images = np.zeros((2, 16, 16, 3), "float32")
    assert model.patch_representations({"images": images, "corruption": kind, "source": source}).dtype == "bfloat16"
    assert model({"images": images, "corruption": kind, "source": source}).dtype == "float32"
    assert model.mask_embedding.dtype == "float32"


# --- The dataset and the loss ------------------------------------------------------------------------------------


def _kinds(dataset, batches=2):
    return [x["corruption"].numpy() for x, _, _ in dataset.take(batches)]


def test_dataset_is_seeded_and_gives_targets_and_weights_of_the_corrupted_patches():
    images = data.digits(image_size=16, batch_size=16, shuffle=False)
    ds = pretraining.masked_patch_dataset(images, 4, target="downsized", seed=3)
    spec = ds.element_spec  # static patch counts (keras-vit-pretrain reads them)
    assert [spec[0]["corruption"].shape.as_list(), spec[1].shape.as_list(), spec[2].shape.as_list()] == [
        [None, 16], [None, 16, 48], [None, 16]]
    first, second = _kinds(ds), _kinds(ds)  # two epochs (iterations) of one dataset
    x, y, w = next(iter(pretraining.masked_patch_dataset(images, 4, target="downsized", seed=3)))
    assert set(x) == {"images", "corruption", "source"} and x["corruption"].shape == (16, 16)
    np.testing.assert_allclose(y, pretraining.patch_targets(x["images"], 4, "downsized"), atol=1e-6)
    np.testing.assert_array_equal(w, (x["corruption"].numpy() > 0).astype("float32"))
    assert w.dtype == tf.float32 and float(np.mean(w)) == 0.5
    again = _kinds(pretraining.masked_patch_dataset(data.digits(image_size=16, batch_size=16, shuffle=False), 4, seed=3))
    other = _kinds(pretraining.masked_patch_dataset(images, 4, seed=4))
    np.testing.assert_array_equal(np.array(first), np.array(again))  # same seed: same masks, epoch by epoch
    np.testing.assert_array_equal(x["corruption"], first[0])
    assert not np.array_equal(first, second) and not np.array_equal(first, other)
    unlabelled = pretraining.masked_patch_dataset(images.map(lambda x, y: x), 4, target="downsized", seed=3)
    np.testing.assert_array_equal(np.array(first), np.array(_kinds(unlabelled)))  # labels are only dropped
    x_plain, y_plain, _ = next(iter(unlabelled))
    np.testing.assert_array_equal(x_plain["images"], x["images"])
    np.testing.assert_array_equal(y_plain, y)


def _numpy_cross_entropy(labels, logits):
    logits = logits.astype(np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    return -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]


@pytest.mark.parametrize("target", ["mean_color", "full"])
def test_only_corrupted_patches_enter_the_loss(target):
    model = pretraining.compile_pretraining(
        pretraining.MaskedPatchPrediction(_backbone(), target=target), total_steps=10, jit_compile=False)
    rng = np.random.default_rng(4)
    kind, _ = pretraining.corruption(np.array([5, 6]), 4, 16)
    weights = (kind.numpy() > 0).astype("float32")
    size = model.outputs_per_patch
    predictions = rng.normal(size=(4, 16, size)).astype("float32")
    if target == "mean_color":
        targets = rng.integers(0, size, (4, 16)).astype("int32")
        per_patch = _numpy_cross_entropy(targets, predictions)
    else:
        targets = rng.uniform(-1, 1, (4, 16, size)).astype("float32")
        per_patch = ((predictions - targets) ** 2).mean(-1)

    def loss(y, p):
        return float(model.loss(y, p, sample_weight=weights))

    base = loss(targets, predictions)
    assert base == pytest.approx(per_patch[weights > 0].mean(), rel=1e-5)
    compiled = model.compute_loss(y=targets, y_pred=predictions, sample_weight=weights)  # what fit minimises
    assert float(compiled) == pytest.approx(base, rel=1e-6)
    untouched, corrupted = np.argwhere(weights == 0)[0], np.argwhere(weights > 0)[0]
    for where, moves in ((untouched, False), (corrupted, True)):
        changed_predictions, changed_targets = predictions.copy(), targets.copy()
        # One output: for "mean_color" the target's logit (a shift of all would leave the softmax alone).
        changed_predictions[(*where, targets[tuple(where)] if target == "mean_color" else 0)] += 3.0
        changed_targets[tuple(where)] = np.argmin(predictions[tuple(where)]) if target == "mean_color" else 5.0
        for changed in (loss(targets, changed_predictions), loss(changed_targets, predictions)):
            assert abs(changed - base) > 1e-2 if moves else changed == base, (where, changed, base)
    if target == "mean_color":  # the accuracy metric counts the corrupted patches only
        predictions[..., 0] = np.where(weights > 0, predictions[..., 0], 100.0)
        targets[weights == 0] = 0  # every untouched patch predicted right
        right = (predictions.argmax(-1) == targets)[weights > 0].mean()
        metrics = model.compute_metrics(None, targets, predictions, sample_weight=weights)
        assert float(metrics["accuracy"]) == pytest.approx(right) and right < 0.5


@pytest.mark.filterwarnings("error:Model doesn't support")  # Keras' silent XLA fall-back is an error
def test_fit_with_xla_on_digits_then_the_backbone_reloads_as_a_plain_keras_vit_model(tmp_path):
    keras.utils.set_random_seed(0)
    backbone = _backbone()
    model = pretraining.MaskedPatchPrediction(backbone)
    images = data.digits(image_size=16, batch_size=32, seed=0)
    ds = pretraining.masked_patch_dataset(images, pretraining.backbone_cell_size(backbone), seed=0).take(8)
    pretraining.compile_pretraining(model, total_steps=32, learning_rate=1e-3, warmup_steps=2)
    assert model.jit_compile is True and model.backbone is backbone
    before = [w.numpy().copy() for w in backbone.weights]
    history = model.fit(ds, epochs=4, verbose=0, shuffle=False).history
    assert np.all(np.isfinite(history["loss"])) and history["loss"][-1] < history["loss"][0] - 0.3, history
    assert 0 <= history["accuracy"][-1] <= 1 and history["accuracy"][-1] > history["accuracy"][0]
    assert all(not np.array_equal(a, w.numpy()) for a, w in zip(before, backbone.weights))  # trained, shared

    path = tmp_path / "backbone.keras"
    model.backbone.save(path)
    reloaded = keras.saving.load_model(path)
    assert type(reloaded) is type(backbone) and not isinstance(reloaded, pretraining.MaskedPatchPrediction)
    assert not [w.path for w in reloaded.weights if "mask" in w.path or "head" in w.path]
    assert len(reloaded.weights) == len(backbone.weights) == len(model.weights) - 3  # [mask], head kernel and bias
    x = next(iter(images))[0][:4]
    np.testing.assert_allclose(reloaded(x), backbone(x), atol=1e-6)


@pytest.mark.slow  # XLA compiles each image size: 25 s (pure) and 50 s (hybrid) on 2 cores
@pytest.mark.filterwarnings("error:Model doesn't support")
@pytest.mark.parametrize("overrides", [{"position_embedding": "sincos_2d"}, {"patch_size": 1, "resnet_num_layers": (1, 1)}])
def test_fit_with_xla_on_batches_of_two_sizes_for_a_model_of_any_resolution(overrides):
    backbone = _backbone(input_shape=(None, None, 3), **overrides)
    model = pretraining.MaskedPatchPrediction(backbone, target="full")
    cell = pretraining.backbone_cell_size(backbone)
    square, wide = ([pretraining.masked_patch_dataset(data.digits(image_size=size, batch_size=16, seed=0), cell,
                                                       target="full").take(2) for size in (16, (16, 24))])
    pretraining.compile_pretraining(model, total_steps=8, learning_rate=1e-3)
    history = model.fit(square.concatenate(wide), epochs=2, verbose=0, shuffle=False).history
    assert model.jit_compile and np.all(np.isfinite(history["loss"])) and history["loss"][1] < history["loss"][0]


def test_pretraining_model_round_trips_through_a_keras_file_with_its_loss(tmp_path):
    model = pretraining.compile_pretraining(
        pretraining.MaskedPatchPrediction(_backbone(position_embedding="learned_2d"), target="downsized"),
        total_steps=10, jit_compile=False)
    model.mask_embedding.assign(np.linspace(-1, 1, 32, dtype="float32"))
    model.optimizer.build(model.trainable_variables)  # as after training: its state is saved too
    kind, source = pretraining.corruption(np.array([0, 1]), 2, 16)
    x = {"images": np.random.default_rng(5).uniform(-1, 1, (2, 16, 16, 3)).astype("float32"),
         "corruption": kind, "source": source}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # "saving a model that has not yet been built", "Skipping ..."
        model.save(tmp_path / "pretraining.keras")
        reloaded = keras.saving.load_model(tmp_path / "pretraining.keras")
    assert isinstance(reloaded, pretraining.MaskedPatchPrediction) and reloaded.target == "downsized"
    np.testing.assert_array_equal(reloaded(x), model(x))
    weights, targets = (kind.numpy() > 0).astype("float32"), np.zeros((2, 16, 48), "float32")
    assert float(reloaded.compute_loss(y=targets, y_pred=reloaded(x), sample_weight=weights)) == pytest.approx(
        float(model.compute_loss(y=targets, y_pred=model(x), sample_weight=weights)), rel=1e-6)


# --- Bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rate", [0, 1, 1.5, -0.1, True, "0.5"])
def test_corruption_rate_outside_0_1_is_refused(rate):
    message = r"`corruption_rate` must be a float in \(0, 1\).*Received: corruption_rate="
    with pytest.raises(ValueError, match=message):
        pretraining.corruption(np.array([0, 0]), 2, 16, corruption_rate=rate)
    images = data.digits(image_size=16, batch_size=8)
    with pytest.raises(ValueError, match=message):
        pretraining.masked_patch_dataset(images, 4, corruption_rate=rate)


def test_unknown_target_non_vit_backbone_and_bad_arguments_are_refused():
    target = r"`target` must be one of 'mean_color', 'downsized', 'full'. Received: target='mean_colour'"
    with pytest.raises(ValueError, match=target):
        pretraining.patch_targets(np.zeros((1, 8, 8, 3)), 4, target="mean_colour")
    with pytest.raises(ValueError, match=target):
        pretraining.masked_patch_dataset(data.digits(image_size=16), 4, target="mean_colour")
    with pytest.raises(ValueError, match=target):
        pretraining.MaskedPatchPrediction(_backbone(), target="mean_colour")
    inputs = keras.Input((16, 16, 3))
    plain = keras.Model(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)), name="cnn")
    for not_a_vit in (plain, "vit"):
        with pytest.raises(ValueError, match=r"`backbone` must be a keras_vit Vision Transformer.*Received: backbone="):
            pretraining.MaskedPatchPrediction(not_a_vit)
    with pytest.raises(ValueError, match=r"`backbone` must be a keras_vit"):
        pretraining.backbone_cell_size(plain)
    with pytest.raises(ValueError, match=r"`channels` must be None or the backbone's input channels \(3\)"):
        pretraining.MaskedPatchPrediction(_backbone(), channels=1)
    with pytest.raises(ValueError, match=r"multiples of cell_size=4.*\(1, 10, 8, 3\)"):
        pretraining.patch_targets(np.zeros((1, 10, 8, 3)), 4)
    with pytest.raises(ValueError, match=r"multiples of cell_size=5"):
        pretraining.masked_patch_dataset(data.digits(image_size=16), 5)
    with pytest.raises(ValueError, match=r"`seed` must be an int >= 0. Received: seed=-1"):
        pretraining.masked_patch_dataset(data.digits(image_size=16), 4, seed=-1)
    with pytest.raises(ValueError, match=r"`model` must be a keras_vit.pretraining.MaskedPatchPrediction"):
        pretraining.compile_pretraining(_backbone(), total_steps=10)
    with pytest.raises(ValueError, match=r"Received: total_steps=0"):
        pretraining.compile_pretraining(pretraining.MaskedPatchPrediction(_backbone()), total_steps=0)


# --- Fresh-user review (issue 14) ----------------------------------------------------------------------------------


@pytest.mark.parametrize("rate,n,count", [(0.5, 1, 1), (0.97, 16, 16), (0.99, 16, 16), (0.2, 2, None)])
def test_a_rate_that_corrupts_every_patch_is_refused_naming_the_counts(rate, n, count):
    if (rate, n) == (0.2, 2):  # floor(0.4 + 0.5) = 0 -> at least 1 of 2: allowed
        assert (pretraining.corruption(np.array([0, 0]), 2, n, rate)[0].numpy() > 0).sum(axis=1).tolist() == [1, 1]
        return
    message = rf"corruption_rate={rate} corrupts {count} of the {n} patches of each image.*none untouched"
    with pytest.raises(ValueError, match=message):
        pretraining.corruption(np.array([0, 0]), 2, n, corruption_rate=rate)
    side = 4 * int(math.isqrt(n))  # n patches of a 4-px cell
    images = tf.data.Dataset.from_tensor_slices(np.zeros((2, side, side, 3), "float32")).batch(2)
    with pytest.raises(ValueError, match=message):
        pretraining.masked_patch_dataset(images, 4, corruption_rate=rate)
    assert (pretraining.corruption(np.array([0, 0]), 2, 16, 0.96)[0].numpy() > 0).sum(axis=1).tolist() == [15, 15]


def test_numpy_float_rates_are_accepted_and_non_integer_sizes_refused():
    for rate in (np.float32(0.5), np.float64(0.5), np.float16(0.5), 0.5):
        kind, _ = pretraining.corruption(np.array([0, 0]), 2, 16, corruption_rate=rate)
        assert (kind.numpy() > 0).sum(axis=1).tolist() == [8, 8]
        images = tf.data.Dataset.from_tensor_slices(np.zeros((2, 8, 8, 3), "float32")).batch(2)
        assert next(iter(pretraining.masked_patch_dataset(images, 4, corruption_rate=rate)))[2].numpy().sum() == 4
    with pytest.raises(ValueError, match=r"`corruption_rate` must be a float in \(0, 1\).*Received: corruption_rate=np.True_"):
        pretraining.corruption(np.array([0, 0]), 2, 16, corruption_rate=np.bool_(True))
    for name, args in (("batch_size", (2.5, 4)), ("num_patches", (2, 4.0)), ("batch_size", ("2", 4))):
        with pytest.raises(ValueError, match=rf"`{name}` must be a positive int. Received: {name}="):
            pretraining.corruption(np.array([0, 0]), *args)
    kind, _ = pretraining.corruption(np.array([0, 0]), np.int64(3), tf.constant(4))  # NumPy ints and int tensors
    assert kind.shape == (3, 4)


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_a_dataset_of_non_float_images_is_refused(dtype):
    images = tf.data.Dataset.from_tensor_slices(np.zeros((2, 8, 8, 3), dtype)).batch(2)
    with pytest.raises(ValueError, match=rf"images must be floats in \[-1, 1\].*preprocess_input.*dtype {dtype}"):
        pretraining.masked_patch_dataset(images, 4)
    labelled = tf.data.Dataset.from_tensor_slices((np.zeros((2, 8, 8, 3), dtype), np.zeros(2, "int32"))).batch(2)
    with pytest.raises(ValueError, match=r"images must be floats in \[-1, 1\]"):
        pretraining.masked_patch_dataset(labelled, 4)


def test_downsized_target_equals_full_at_a_4_pixel_cell():
    images = np.random.default_rng(6).uniform(-1, 1, (2, 8, 12, 3)).astype("float32")
    full = pretraining.patch_targets(images, 4, "full").numpy()
    np.testing.assert_array_equal(pretraining.patch_targets(images, 4, "downsized").numpy(), full)
    small = pretraining.patch_targets(images, 2, "downsized").numpy()  # a 2-px cell is upsampled: 2 x 2 copies
    cells = images.reshape(2, 4, 2, 6, 2, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 24, 2, 2, 3)
    np.testing.assert_allclose(small.reshape(2, 24, 4, 4, 3), cells.repeat(2, axis=2).repeat(2, axis=3), atol=1e-6)


def test_a_hybrid_spreads_one_cells_pixels_over_many_tokens_a_pure_vit_over_one():
    """Measured for the docs: the [mask] replaces a hybrid's token after the ResNet, which has seen the clean image."""
    rng = np.random.default_rng(7)
    images = rng.uniform(-1, 1, (1, 32, 32, 3)).astype("float32")
    changed = images.copy()
    changed[0, 8:16, 8:16] = rng.uniform(-1, 1, (8, 8, 3))  # cell (1, 1) of an 8-px grid; pure: 4 cells of 4 px

    def tokens_changed(backbone):
        grid = keras.Model(backbone.inputs[0], backbone.get_layer("patches").output)
        delta = np.abs(grid(changed).numpy() - grid(images).numpy()).max(axis=-1)[0]
        return int((delta > 1e-6).sum()), delta.size

    pure = tokens_changed(_backbone(input_shape=(32, 32, 3), patch_size=8))
    hybrid = tokens_changed(_backbone(input_shape=(32, 32, 3), patch_size=1, resnet_num_layers=(1, 1)))
    assert pure == (1, 16)
    assert hybrid == (16, 16)  # GroupNorm's statistics span the image: every token moves


def test_mean_color_levels_are_exact_on_real_8_bit_images():
    """Against integer arithmetic on scikit-learn's sample images: level = floor(8 * sum / (255 * n))."""
    from sklearn.datasets import load_sample_images

    from keras_vit import preprocess_input

    cell = 4
    pixels = np.stack([image[:320, :480] for image in load_sample_images().images])  # (2, 320, 480, 3) uint8
    batch, height, width, channels = pixels.shape
    sums = pixels.astype(np.int64).reshape(batch, height // cell, cell, width // cell, cell, channels).sum(axis=(2, 4))
    levels = np.minimum(8 * sums // (255 * cell * cell), 7).reshape(batch, -1, channels)
    expected = (levels * np.array([64, 8, 1])).sum(-1)
    on_edge = (8 * sums) % (255 * cell * cell) == 0
    assert on_edge.sum() > 100  # the case that matters is there
    got = pretraining.patch_targets(preprocess_input(pixels.astype("float32")), cell).numpy()
    np.testing.assert_array_equal(got, expected)
