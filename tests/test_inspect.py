"""keras_vit.inspect: the paper's inspection tools on hand-made cases and a tiny model."""

import matplotlib.image
import numpy as np
from keras import ops
import pytest

import keras_vit
from keras_vit import inspect as vit_inspect


@pytest.fixture(scope="module")
def tiny():
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                                        input_shape=(16, 16, 3), classes=5)
    rng = np.random.default_rng(0)
    for w in model.weights:
        w.assign(rng.normal(0, 0.3, w.shape).astype("float32") + (1.0 if "gamma" in w.path else 0.0))
    return model


def _images(n=3):
    return np.random.default_rng(1).uniform(-1, 1, (n, 16, 16, 3)).astype("float32")


def test_rollout_of_identity_attention_is_the_identity():
    eye = np.broadcast_to(np.eye(5), (2, 3, 5, 5))
    np.testing.assert_allclose(vit_inspect.rollout([eye, eye, eye]), np.broadcast_to(np.eye(5), (2, 5, 5)))


def test_rollout_matches_the_formula_by_hand():
    rng = np.random.default_rng(0)
    layers = []
    for _ in range(2):
        a = rng.uniform(size=(1, 2, 3, 3))
        layers.append(a / a.sum(-1, keepdims=True))
    step = [0.5 * a.mean(1)[0] + 0.5 * np.eye(3) for a in layers]
    np.testing.assert_allclose(vit_inspect.rollout(layers)[0], step[1] @ step[0], rtol=1e-6)
    np.testing.assert_allclose(vit_inspect.rollout(layers, residual=False)[0],
                               layers[1].mean(1)[0] @ layers[0].mean(1)[0], rtol=1e-6)
    with pytest.raises(ValueError, match="non-empty list"):
        vit_inspect.rollout([])


def test_attention_distance_on_hand_made_cases():
    eye = np.eye(1 + 4)[None, None]  # class token + a 2x2 grid, each patch attends to itself
    assert vit_inspect.attention_distance([eye], (2, 2), 16, 1).tolist() == [[0.0]]
    half = np.full((1, 1, 2, 2), 0.5)  # two side-by-side patches, each half on itself, half on the other
    np.testing.assert_allclose(vit_inspect.attention_distance([half], (1, 2), 16, 0), [[8.0]])
    corner = np.zeros((1, 1, 4, 4))
    corner[..., 3] = 1.0  # everyone looks at the bottom-right patch of a 2x2 grid of 10-px patches
    expected = (np.sqrt(200) + 10 + 10 + 0) / 4
    np.testing.assert_allclose(vit_inspect.attention_distance([corner], (2, 2), 10, 0), [[expected]], rtol=1e-6)


def test_attention_weights_are_the_models_own(tiny):
    before = len(tiny.weights)
    maps = vit_inspect.attention_weights(tiny, _images())
    assert len(tiny.weights) == before  # nothing rebuilt, no second copy
    assert len(maps) == 2 and maps[0].shape == (3, 4, 17, 17)
    np.testing.assert_allclose(maps[1].sum(-1), 1.0, rtol=1e-5)
    # Layer 0 by hand from the same weights: softmax(q k^T / sqrt(d)) of the normed patch-encoder output.
    import keras

    z = keras.Model(tiny.inputs, tiny.get_layer("patch_encoder").output).predict(_images(), verbose=0)
    block = tiny.get_layer("transformer_block_0")
    g, b = block.norm_1.gamma.numpy(), block.norm_1.beta.numpy()
    y = (z - z.mean(-1, keepdims=True)) / np.sqrt(z.var(-1, keepdims=True) + 1e-6) * g + b
    att = block.attention
    q = np.einsum("bnd,dhk->bhnk", y, att.query_dense.kernel.numpy()) + att.query_dense.bias.numpy()[:, None]
    k = np.einsum("bnd,dhk->bhnk", y, att.key_dense.kernel.numpy()) + att.key_dense.bias.numpy()[:, None]
    logits = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    expected /= expected.sum(-1, keepdims=True)
    np.testing.assert_allclose(maps[0], expected, atol=1e-5)


def test_model_level_shapes_and_ranges(tiny):
    maps = vit_inspect.attention_rollout(tiny, _images(2))
    assert maps.shape == (2, 16, 16) and maps.min() >= 0 and maps.max() <= 1
    # The brightest 4x4 cell of each map is the patch the class token draws most from in the rollout.
    cls_row = vit_inspect.rollout(vit_inspect.attention_weights(tiny, _images(2)))[:, 0, 1:]
    cells = maps.reshape(2, 4, 4, 4, 4).mean(axis=(2, 4)).reshape(2, 16)
    assert (cells.argmax(-1) == cls_row.argmax(-1)).all()
    distances = vit_inspect.mean_attention_distance(tiny, _images(2))
    assert distances.shape == (2, 4)
    assert (distances > 0).all() and (distances < np.hypot(12, 12)).all()  # between patch centres of a 4x4 grid
    with pytest.raises(ValueError, match=r"`images` must have shape \(batch >= 1, 16, 16, 3\)"):
        vit_inspect.attention_weights(tiny, np.zeros((2, 8, 8, 3)))


def test_position_embedding_similarity(tiny):
    sim = vit_inspect.position_embedding_similarity(tiny)
    assert sim.shape == (4, 4, 4, 4)
    flat = sim.reshape(16, 16)
    np.testing.assert_allclose(np.diag(flat), 1.0, rtol=1e-5)
    np.testing.assert_allclose(flat, flat.T, atol=1e-6)
    pe = tiny.get_layer("patch_encoder").position_embedding.numpy()[0, 1:]
    cos = pe[3] @ pe[5] / np.linalg.norm(pe[3]) / np.linalg.norm(pe[5])
    np.testing.assert_allclose(sim[0, 3, 1, 1], cos, rtol=1e-5)  # patch (0, 3) against patch (1, 1)


def test_embedding_filters_find_the_planted_direction():
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                                        input_shape=(16, 16, 3), classes=5)
    rng = np.random.default_rng(0)
    direction = rng.normal(size=48)
    direction /= np.linalg.norm(direction)
    kernel = np.outer(direction, rng.normal(0, 5, 32)) + rng.normal(0, 0.01, (48, 32))
    model.get_layer("patch_encoder").projection.kernel.assign(kernel.astype("float32"))
    filters = vit_inspect.embedding_filters(model, 3)
    assert filters.shape == (3, 4, 4, 3)
    assert abs(filters[0].ravel() @ direction) > 0.999
    with pytest.raises(ValueError, match="`n` must be at most 32"):
        vit_inspect.embedding_filters(model, 40)
    hybrid = keras_vit.VisionTransformer(patch_size=1, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
                                         input_shape=(32, 32, 3), resnet_num_layers=(1, 1))
    with pytest.raises(ValueError, match="needs a pure ViT"):
        vit_inspect.embedding_filters(hybrid)
    assert vit_inspect.mean_attention_distance(hybrid, np.zeros((1, 32, 32, 3))).shape == (1, 4)


def test_plots_write_readable_pngs(tmp_path, tiny):
    x = _images(2)
    paths = [
        vit_inspect.plot_attention_rollout(x, vit_inspect.attention_rollout(tiny, x), tmp_path / "rollout.png"),
        vit_inspect.plot_mean_attention_distance(vit_inspect.mean_attention_distance(tiny, x), tmp_path / "d.png", 16),
        vit_inspect.plot_position_embedding_similarity(vit_inspect.position_embedding_similarity(tiny),
                                                       tmp_path / "pe.png"),
        vit_inspect.plot_embedding_filters(vit_inspect.embedding_filters(tiny, 7), tmp_path / "filters.png"),
    ]
    for path in paths:
        image = matplotlib.image.imread(path)
        assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50 and image.std() > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.png", "filters.png", "pe.png", "rollout.png"]


def test_plots_refuse_bad_input_and_never_replace_a_folder(tmp_path, tiny):
    folder = tmp_path / "keep"
    folder.mkdir()
    (folder / "important.txt").write_text("x")
    x = _images(2)
    heat = vit_inspect.attention_rollout(tiny, x)
    with pytest.raises(IsADirectoryError, match="is a folder; give a file name"):
        vit_inspect.plot_attention_rollout(x, heat, folder)
    assert (folder / "important.txt").read_text() == "x"
    with pytest.raises(ValueError, match=r"`maps` \(batch, height, width\) to match"):
        vit_inspect.plot_attention_rollout(x, heat[:1], tmp_path / "a.png")
    with pytest.raises(ValueError, match=r"`distances` must be \(num_layers >= 1, num_heads >= 1\)"):
        vit_inspect.plot_mean_attention_distance(np.zeros(3), tmp_path / "b.png")
    with pytest.raises(ValueError, match=r"`similarity` must be \(rows, cols, rows, cols\)"):
        vit_inspect.plot_position_embedding_similarity(np.zeros((4, 4)), tmp_path / "c.png")
    with pytest.raises(ValueError, match=r"`filters` must be \(n >= 1, P, P, 1 or 3\)"):
        vit_inspect.plot_embedding_filters(np.zeros((5, 4, 4)), tmp_path / "d.png")
    with pytest.raises(ValueError, match=r"`images` must have shape \(batch >= 1, 16, 16, 3\)"):
        vit_inspect.attention_weights(tiny, np.zeros((0, 16, 16, 3)))
    with pytest.raises(ValueError, match="same batch and seq"):
        vit_inspect.rollout([np.ones((1, 2, 5, 5)) / 5, np.ones((1, 2, 4, 4)) / 4])
    assert vit_inspect.plot_attention_rollout(x[0], heat[0], tmp_path / "one.png")  # one image works
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep", "one.png"]


# ----------------------------------------------------------------------------- masked patch prediction


def test_mean_color_image_decodes_each_class_to_its_bin_centres():
    rng = np.random.default_rng(0)
    classes = rng.integers(0, 512, (2, 6))
    painted = vit_inspect.mean_color_image(classes, (2, 3), 4)
    assert painted.shape == (2, 8, 12, 3) and painted.dtype == np.float32
    for b in range(2):
        for n in range(6):
            r, c = divmod(n, 3)
            k = int(classes[b, n])
            expected = (np.array([k // 64, k // 8 % 8, k % 8]) + 0.5) / 8  # red most significant
            patch = painted[b, 4 * r:4 * r + 4, 4 * c:4 * c + 4]
            np.testing.assert_array_equal(patch, np.broadcast_to(expected, (4, 4, 3)))
    grey = vit_inspect.mean_color_image([[0, 7]], (1, 2), 1, channels=1)
    np.testing.assert_array_equal(grey[0, 0, :, 0], [0.0625, 0.9375])
    with pytest.raises(ValueError, match=r"must be in \[0, 512\) for channels=3. Received: classes in \[0, 512\]"):
        vit_inspect.mean_color_image([[0, 512]], (1, 2), 2)
    with pytest.raises(ValueError, match=r"`classes` must be an int array \(batch, 4\) for grid=\(2, 2\)"):
        vit_inspect.mean_color_image(np.zeros((1, 3), "int32"), (2, 2), 2)


def test_mean_color_image_inverts_patch_targets_up_to_the_bin():
    from keras_vit import pretraining

    images = np.random.default_rng(2).uniform(-1, 1, (3, 8, 8, 3)).astype("float32")
    classes = ops.convert_to_numpy(pretraining.patch_targets(images, 4))
    painted = vit_inspect.mean_color_image(classes, (2, 2), 4)
    means = (images.reshape(3, 2, 4, 2, 4, 3).mean(axis=(2, 4)) + 1) / 2  # (3, 2, 2, 3) in [0, 1]
    np.testing.assert_array_less(np.abs(painted[:, ::4, ::4] - means), 1 / 16 + 1e-6)  # within half a bin
    np.testing.assert_array_equal(ops.convert_to_numpy(pretraining.patch_targets(painted * 2 - 1, 4)), classes)  # a fixed point


def test_corrupted_images_mask_replace_and_keep():
    x = np.random.default_rng(3).uniform(-1, 1, (1, 8, 8, 1)).astype("float32")
    kind = np.array([[1, 2, 0, 3]])
    source = np.array([[0, 2, 2, 3]])  # patch 1 (top right) shows patch 2 (bottom left)
    out = vit_inspect.corrupted_images(x, kind, source, 4)
    np.testing.assert_array_equal(out[0, :4, :4], 0.0)
    np.testing.assert_array_equal(out[0, :4, 4:], x[0, 4:, :4])
    np.testing.assert_array_equal(out[0, 4:], x[0, 4:])
    np.testing.assert_array_equal(vit_inspect.corrupted_images(x, kind, None, 4)[0, :4, 4:], x[0, :4, 4:])
    with pytest.raises(ValueError, match=r"`corruption` must be an int array \(1, 4\) in \[0, 4\)"):
        vit_inspect.corrupted_images(x, np.array([[1, 4, 0, 0]]), source, 4)
    with pytest.raises(ValueError, match=r"`source` must be an int array \(1, 4\) in \[0, 4\)"):
        vit_inspect.corrupted_images(x, kind, np.array([[0, 4, 2, 3]]), 4)
    with pytest.raises(ValueError, match="multiples of cell_size=3"):
        vit_inspect.corrupted_images(x, kind, source, 3)


@pytest.fixture(scope="module")
def pretraining_model():
    from keras_vit import pretraining

    backbone = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=32,
                                           input_shape=(16, 16, 3), include_top=False)
    model = pretraining.MaskedPatchPrediction(backbone)
    rng = np.random.default_rng(4)
    model.head.kernel.assign(rng.normal(0, 1.0, model.head.kernel.shape).astype("float32"))  # decisive logits
    return model


def test_masked_patch_prediction_returns_the_models_own_predictions(pretraining_model, tmp_path):
    from keras_vit import pretraining

    x = _images(3)
    r = vit_inspect.masked_patch_prediction(pretraining_model, x, seed=5, batch_size=2)
    kind, source = (ops.convert_to_numpy(t) for t in pretraining.corruption(np.array([5, 0]), 3, 16))
    np.testing.assert_array_equal(r["corruption"], kind)
    np.testing.assert_array_equal(r["source"], source)
    assert ((kind > 0).sum(axis=1) == 8).all()
    logits = ops.convert_to_numpy(pretraining_model({"images": x, "corruption": kind, "source": source}))
    np.testing.assert_array_equal(r["predicted_classes"], logits.argmax(-1))
    means = (x.reshape(3, 4, 4, 4, 4, 3).mean(axis=(2, 4)).reshape(3, 16, 3) + 1) / 2  # NumPy targets
    levels = np.minimum(np.floor(means * 8), 7).astype(int)
    np.testing.assert_array_equal(r["true_classes"], levels @ [64, 8, 1])
    hit = kind > 0
    assert r["accuracy"] == np.mean(r["predicted_classes"][hit] == r["true_classes"][hit])
    assert len(set(r["predicted_classes"][hit].tolist())) > 1  # not one constant colour: the arg-max of real logits
    np.testing.assert_allclose(r["images"], (x + 1) / 2, atol=1e-7)
    np.testing.assert_allclose(r["corrupted"] * 2 - 1, vit_inspect.corrupted_images(x, kind, source, 4), atol=1e-6)
    cells = lambda a: a.reshape(3, 4, 4, 4, 4, 3).transpose(0, 1, 3, 2, 4, 5).reshape(3, 16, 4, 4, 3)  # noqa: E731
    for key, classes in (("predicted", r["predicted_classes"]), ("true", r["true_classes"])):
        painted = cells(vit_inspect.mean_color_image(classes, (4, 4), 4))
        np.testing.assert_array_equal(cells(r[key])[hit], painted[hit])  # corrupted: the class's colour
        np.testing.assert_allclose(cells(r[key])[~hit], cells(r["images"])[~hit])  # the others: the image
    path = vit_inspect.plot_masked_patch_prediction(r, tmp_path / "mpp.png")
    image = matplotlib.image.imread(path)
    assert image.ndim == 3 and image.shape[0] > 200 and image.std() > 0


def test_masked_patch_prediction_refuses_bad_input(pretraining_model, tmp_path):
    from keras_vit import pretraining

    with pytest.raises(ValueError, match="with target='mean_color'. Received: model='vision_transformer' of type Func"):
        vit_inspect.masked_patch_prediction(pretraining_model.backbone, _images(1))
    full = pretraining.MaskedPatchPrediction(pretraining_model.backbone, target="full")
    with pytest.raises(ValueError, match="with target='full'"):
        vit_inspect.masked_patch_prediction(full, _images(1))
    with pytest.raises(ValueError, match=r"`images` must have shape \(batch >= 1, 16, 16, 3\)"):
        vit_inspect.masked_patch_prediction(pretraining_model, np.zeros((1, 8, 8, 3)))
    with pytest.raises(ValueError, match=r"`corruption` must be an int array \(1, 16\)"):
        vit_inspect.masked_patch_prediction(pretraining_model, _images(1), np.zeros((1, 4), "int32"))
    with pytest.raises(ValueError, match="`seed` must be an int >= 0. Received: seed=-1"):
        vit_inspect.masked_patch_prediction(pretraining_model, _images(1), seed=-1)
    with pytest.raises(ValueError, match="`result` must be the dict of masked_patch_prediction"):
        vit_inspect.plot_masked_patch_prediction({"images": np.zeros((1, 4, 4, 3))}, tmp_path / "x.png")
    r = vit_inspect.masked_patch_prediction(pretraining_model, _images(1))
    with pytest.raises(ValueError, match=r"`result\['corruption'\]` must be \(batch, num_patches\)"):
        vit_inspect.plot_masked_patch_prediction({**r, "corruption": r["corruption"][:, :5]}, tmp_path / "y.png")
    assert not list(tmp_path.iterdir())
