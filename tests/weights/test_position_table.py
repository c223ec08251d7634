"""Position tables with and without a class-token row, and the patch grids they are read on (issue 12, part A).

timm's `no_embed_class` models and big_vision add the position table to the patch tokens and prepend the
class token afterwards, so their table has rows for the patches only. keras_vit adds one table to
[class token; patches]; a zero class-token row computes the same. The judge is the NumPy forward pass of
tests/weights/reference.py, whose embedding step follows timm's `_pos_embed` (`no_embed_class=True`).
"""

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import CheckpointError, infer_config, load_pretrained, resample_position_embedding
from keras_vit.weights.resample import grid_shape
from tests.weights import reference
from tests.weights.test_loader import _big_vision

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
POS = "Transformer/posembed_input/pos_embedding"


def _tiny(height, width):
    return keras_vit.VisionTransformer(**TINY, input_shape=(height, width, 3), classes=5, classifier_activation=None)


def _x(height, width):
    return np.random.default_rng(11).uniform(-1, 1, (2, height, width, 3)).astype("float32")


def _table(model):
    return model.get_layer("patch_encoder").position_embedding.numpy()


def _check_no_class_row_message(report, rows, grid):
    notes = [m for m in report.messages if "no class-token row" in m]
    assert len(notes) == 1, report.messages
    assert f"{rows} rows for a {grid[0]}x{grid[1]} patch grid" in notes[0] and "zero class-token row" in notes[0]


@pytest.mark.parametrize("grid", [(1, 1), (4, 4), (2, 4)], ids=["1x1", "4x4", "2x4"])
def test_table_without_class_row_loads_exactly(grid):
    arrays = reference.google_checkpoint(21, grid=grid, class_row=False)
    assert arrays[POS].shape == (1, grid[0] * grid[1], 32)
    model = _tiny(4 * grid[0], 4 * grid[1])
    report = load_pretrained(model, arrays)
    assert report.resampled is None and report.head == "loaded"
    _check_no_class_row_message(report, grid[0] * grid[1], grid)
    assert len(report.messages) == 1
    np.testing.assert_array_equal(_table(model)[:, 0], 0)
    np.testing.assert_array_equal(_table(model)[:, 1:], arrays[POS])
    x = _x(4 * grid[0], 4 * grid[1])
    expected = reference.forward(arrays, x, layers=2, no_embed_class=True)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("source,target,source_grid", [
    ((4, 4), (1, 1), None),
    ((1, 1), (4, 4), None),
    ((2, 4), (4, 4), (2, 4)),   # rectangular: 8 rows fit no square, the caller names the grid
    ((4, 4), (2, 4), None),     # square file into a rectangular model
], ids=["4x4_to_1x1", "1x1_to_4x4", "2x4_to_4x4", "4x4_to_2x4"])
def test_table_without_class_row_resamples(source, target, source_grid):
    arrays = reference.google_checkpoint(22, grid=source, class_row=False)
    model = _tiny(4 * target[0], 4 * target[1])
    report = load_pretrained(model, arrays, source_grid=source_grid)
    assert report.resampled == (source, target)
    _check_no_class_row_message(report, source[0] * source[1], source)
    resampled = [m for m in report.messages if m.startswith("Resampled")]
    assert len(resampled) == 1 and "class token row kept" not in resampled[0]
    expected_rows = reference.zoom_patch_rows(arrays[POS], source, target)
    if source == (1, 1):  # one position, spread over every patch
        np.testing.assert_allclose(expected_rows, np.broadcast_to(arrays[POS], expected_rows.shape))
    np.testing.assert_array_equal(_table(model)[:, 0], 0)
    np.testing.assert_allclose(_table(model)[:, 1:], expected_rows, atol=1e-6, rtol=0)
    x = _x(4 * target[0], 4 * target[1])
    expected = reference.forward(dict(arrays, **{POS: expected_rows}), x, layers=2, no_embed_class=True)
    np.testing.assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5, rtol=0)


def _timm_names(a, layers, width=32):
    """The same arrays under timm's VisionTransformer names (PyTorch layouts, q/k/v fused), in NumPy."""
    out = {
        "cls_token": a["cls"], "pos_embed": a[POS],
        "patch_embed.proj.weight": a["embedding/kernel"].transpose(3, 2, 0, 1),  # HWIO -> OIHW
        "patch_embed.proj.bias": a["embedding/bias"],
        "norm.weight": a["Transformer/encoder_norm/scale"], "norm.bias": a["Transformer/encoder_norm/bias"],
        "head.weight": a["head/kernel"].T, "head.bias": a["head/bias"],
    }
    for i in range(layers):
        b, t = f"Transformer/encoderblock_{i}", f"blocks.{i}"
        att = f"{b}/MultiHeadDotProductAttention_1"
        out[f"{t}.attn.qkv.weight"] = np.concatenate([a[f"{att}/{n}/kernel"].reshape(width, width).T
                                                      for n in ("query", "key", "value")])
        out[f"{t}.attn.qkv.bias"] = np.concatenate([a[f"{att}/{n}/bias"].reshape(width)
                                                    for n in ("query", "key", "value")])
        out[f"{t}.attn.proj.weight"] = a[f"{att}/out/kernel"].reshape(width, width).T
        out[f"{t}.attn.proj.bias"] = a[f"{att}/out/bias"]
        for ours, theirs in (("LayerNorm_0", "norm1"), ("LayerNorm_2", "norm2")):
            out[f"{t}.{theirs}.weight"], out[f"{t}.{theirs}.bias"] = a[f"{b}/{ours}/scale"], a[f"{b}/{ours}/bias"]
        for ours, theirs in (("Dense_0", "fc1"), ("Dense_1", "fc2")):
            out[f"{t}.mlp.{theirs}.weight"] = a[f"{b}/MlpBlock_3/{ours}/kernel"].T
            out[f"{t}.mlp.{theirs}.bias"] = a[f"{b}/MlpBlock_3/{ours}/bias"]
    return out


@pytest.mark.parametrize("layout", ["timm", "big_vision"])
def test_layouts_in_the_wild_without_class_row(layout):
    arrays = reference.google_checkpoint(23, grid=(4, 4), class_row=False)
    stored = _timm_names(arrays, layers=2) if layout == "timm" else _big_vision(arrays, scanned=False)
    assert stored["pos_embed" if layout == "timm" else "params/pos_embedding"].shape == (1, 16, 32)
    model = _tiny(16, 16)
    report = load_pretrained(model, stored)
    assert report.layout == layout
    x = _x(16, 16)
    np.testing.assert_allclose(model.predict(x, verbose=0), reference.forward(arrays, x, 2, no_embed_class=True),
                               atol=1e-5, rtol=0)


def test_a_count_that_fits_two_readings_is_reported_and_source_grid_decides():
    # A 2x4 model saved with its class-token row: 9 rows, also a 3x3 grid without one.
    arrays = reference.google_checkpoint(24, grid=(2, 4))
    model = _tiny(8, 16)
    report = load_pretrained(model, arrays)
    assert report.resampled is None
    np.testing.assert_array_equal(_table(model), arrays[POS])
    assert report.messages == [
        f"Checkpoint key {POS!r}: read its 9 rows as a class-token row and a 2x4 patch grid; they also fit no "
        "class-token row and a 3x3 patch grid (pass source_grid=(3, 3) for that reading)"
    ]
    report = load_pretrained(model, arrays, source_grid=(3, 3))
    assert report.resampled == ((3, 3), (2, 4))
    _check_no_class_row_message(report, 9, (3, 3))
    np.testing.assert_array_equal(_table(model)[:, 0], 0)
    np.testing.assert_allclose(_table(model)[:, 1:], reference.zoom_patch_rows(arrays[POS], (3, 3), (2, 4)), atol=1e-6, rtol=0)


def test_grid_errors_name_only_what_the_caller_gave():
    arrays = reference.google_checkpoint(25, grid=(2, 4), class_row=False)  # 8 rows: no square, with or without
    model = _tiny(16, 16)
    before = _table(model).copy()
    with pytest.raises(CheckpointError) as e:
        load_pretrained(model, arrays)
    message = str(e.value)
    assert message == (
        f"Checkpoint key {POS!r} has 8 rows: neither 7 patches after a class-token row nor 8 patches without one "
        "make the model's 4x4 grid or a square grid; pass `source_grid=(rows, cols)`, the checkpoint's patch grid"
    )
    assert "Received" not in message
    with pytest.raises(CheckpointError, match=r"has 8 rows, which hold 7 \(after a class-token row\) or 8 \(without "
                                              r"one\) patches; `source_grid` has 9. Received: source_grid=\(3, 3\)"):
        load_pretrained(model, arrays, source_grid=(3, 3))
    with pytest.raises(CheckpointError, match=r"`source_grid` must be \(rows, cols\) of positive ints. "
                                              r"Received: source_grid=\(0, 8\)"):
        load_pretrained(model, arrays, source_grid=(0, 8))
    no_cls = reference.google_checkpoint(25, grid=(2, 4), cls=False)
    gap = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), classifier="gap", classes=5)
    with pytest.raises(CheckpointError, match=f"{POS!r} has 8 rows: its 8 patches do not make the model's 4x4 grid "
                                              "or a square grid; pass `source_grid"):
        load_pretrained(gap, no_cls)
    np.testing.assert_array_equal(_table(model), before)  # nothing assigned


def test_resampling_a_table_with_no_patch_rows_is_a_clear_error():
    with pytest.raises(ValueError, match=r"`position_embedding` has 1 rows, none left for patches after "
                                         r"num_prefix_tokens=1. Received shape \(1, 1, 8\)"):
        resample_position_embedding(np.zeros((1, 1, 8), "float32"), (2, 2), 1)
    with pytest.raises(ValueError, match="needs at least one patch row; it has 0"):
        grid_shape(0)


@pytest.mark.parametrize("grid,class_row", [((4, 4), False), ((4, 4), True), ((1, 1), False), ((1, 1), True)])
def test_infer_config_reads_the_image_size_with_or_without_class_row(grid, class_row):
    arrays = reference.google_checkpoint(26, grid=grid, class_row=class_row)
    config = infer_config(arrays)
    assert config["image_size"] == 4 * grid[0] and config["class_token"] is True
