"""load_pretrained: layouts, heads, resampling, mismatches, all-or-nothing, round trips."""

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import (
    CheckpointError,
    detect_layout,
    load_pretrained,
    read_checkpoint,
    resample_position_embedding,
    save_checkpoint,
)
from tests.weights import reference

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)


def _tiny(input_shape=(16, 16, 3), classes=5, **kwargs):
    return keras_vit.VisionTransformer(**TINY, input_shape=input_shape, classes=classes,
                                       classifier_activation=None, **kwargs)


def _x(shape=(2, 16, 16, 3)):
    return np.random.default_rng(3).uniform(-1, 1, shape).astype("float32")


def _snapshot(model):
    return [w.numpy().copy() for w in model.weights]


def _save(tmp_path, arrays, name="c.npz"):
    path = tmp_path / name
    np.savez(path, **arrays)
    return str(path)


# ----------------------------------------------------------------------------- layouts

def _big_vision(arrays, scanned):
    """The same weights as big_vision writes them: params/ prefix, linen numbering, optional scan."""
    out = {}
    renames = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0", "LayerNorm_2": "LayerNorm_1",
               "MlpBlock_3": "MlpBlock_0"}
    blocks = {}
    for k, v in arrays.items():
        if k == "Transformer/posembed_input/pos_embedding":
            out["params/pos_embedding"] = v
            continue
        if k.startswith("Transformer/encoderblock_"):
            _, block, rest = k.split("/", 2)
            for old, new in renames.items():
                rest = rest.replace(old, new)
            if scanned:
                blocks.setdefault(rest, []).append((int(block.split("_")[1]), v))
                continue
            k = f"Transformer/{block}/{rest}"
        out[f"params/{k}"] = v
    for rest, items in blocks.items():
        out[f"params/Transformer/encoderblock/{rest}"] = np.stack([v for _, v in sorted(items)])
    return out


@pytest.mark.parametrize("layout", ["opt_target", "big_vision", "big_vision_scanned"])
def test_every_google_layout_gives_the_same_logits(tmp_path, layout):
    arrays = reference.google_checkpoint(2)
    if layout == "opt_target":
        variant = {f"opt/target/{k}": v for k, v in arrays.items()}
    else:
        variant = _big_vision(arrays, scanned=layout == "big_vision_scanned")
    path = _save(tmp_path, variant)
    assert detect_layout(read_checkpoint(path)) == ("google" if layout == "opt_target" else "big_vision")
    model = _tiny()
    load_pretrained(model, path)
    expected = reference.forward(arrays, _x(), layers=2)
    np.testing.assert_allclose(model.predict(_x(), verbose=0), expected, atol=1e-5, rtol=0)


def test_a_bfloat16_safetensors_checkpoint_loads_and_matches_the_float32_one(tmp_path):
    """Issue 43, item 7: bfloat16, the dtype most recent checkpoints are published in, was refused ("not a real
    number type", or "truncated or corrupt" by import order). Widened exactly: the model computes the reference
    forward pass of the bfloat16-rounded weights, and the float32 file's logits to bfloat16 precision."""
    import ml_dtypes
    from safetensors.numpy import save_file

    arrays = reference.google_checkpoint(2)
    save_file({k: v.astype(ml_dtypes.bfloat16) for k, v in arrays.items()}, str(tmp_path / "bf16.safetensors"))
    save_file({k: v.astype("float32") for k, v in arrays.items()}, str(tmp_path / "f32.safetensors"))
    read = read_checkpoint(str(tmp_path / "bf16.safetensors"))
    assert all(v.dtype == np.float32 for v in read.values())
    rounded = {k: v.astype(ml_dtypes.bfloat16).astype("float32") for k, v in arrays.items()}
    assert all(np.array_equal(read[k], rounded[k]) for k in arrays)
    logits = {}
    for name in ("bf16", "f32"):
        model = _tiny()
        load_pretrained(model, str(tmp_path / f"{name}.safetensors"))
        logits[name] = model.predict(_x(), verbose=0)
    np.testing.assert_allclose(logits["bf16"], reference.forward(rounded, _x(), layers=2), atol=1e-5, rtol=0)
    scale = np.abs(logits["f32"]).max()
    assert 0 < np.abs(logits["bf16"] - logits["f32"]).max() <= 0.05 * scale  # 8 mantissa bits, 2 blocks


def test_groupnorm_style_parameters_are_flattened(tmp_path):
    arrays = reference.google_checkpoint(2)
    arrays["Transformer/encoder_norm/scale"] = arrays["Transformer/encoder_norm/scale"].reshape(1, 1, 1, 32)
    model = _tiny()
    load_pretrained(model, _save(tmp_path, arrays))
    np.testing.assert_array_equal(model.get_layer("encoder_norm").gamma.numpy(),
                                  arrays["Transformer/encoder_norm/scale"].reshape(32))


# ----------------------------------------------------------------------------- mismatches

def _mismatch(arrays):
    arrays["Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel"] = np.zeros((32, 48), np.float32)
    return arrays


def _missing(arrays):
    del arrays["Transformer/encoderblock_0/LayerNorm_2/bias"]
    return arrays


def _extra(arrays):
    arrays["conv_root/kernel"] = np.zeros((7, 7, 3, 64), np.float32)
    return arrays


def _no_cls(arrays):
    del arrays["cls"]
    arrays["Transformer/posembed_input/pos_embedding"] = arrays["Transformer/posembed_input/pos_embedding"][:, 1:]
    return arrays


MISMATCHES = [
    (_mismatch, r"'Transformer/encoderblock_1/MlpBlock_3/Dense_0/kernel' has shape \(32, 48\), the model needs \(32, 64\)"),
    (_missing, r"missing key 'Transformer/encoderblock_0/LayerNorm_2/bias' \(model shape \(32,\)\)"),
    (_extra, r"has parameters this model has no place for: conv_root/kernel"),
    (_no_cls, r"has no class token \('cls'\), the model has .*class_token=True"),
    (lambda a: reference.google_checkpoint(0, layers=3), r"has 3 encoder blocks, the model has 2"),
    (lambda a: reference.google_checkpoint(0, patch=8, grid=(2, 2)),
     r"'embedding/kernel' has shape \(8, 8, 3, 32\), the model needs \(4, 4, 3, 32\)"),
]


@pytest.mark.parametrize("corrupt,message", MISMATCHES, ids=[m[:30] for _, m in MISMATCHES])
def test_mismatch_raises_naming_the_key_and_leaves_the_model_untouched(tmp_path, corrupt, message):
    model = _tiny()
    before = _snapshot(model)
    path = _save(tmp_path, corrupt(reference.google_checkpoint(4)))
    with pytest.raises(CheckpointError, match=message):
        load_pretrained(model, path)
    for a, b in zip(before, _snapshot(model)):
        np.testing.assert_array_equal(a, b)


def test_unreadable_files_raise_a_clear_error(tmp_path):
    good = _save(tmp_path, reference.google_checkpoint(0))
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="could not be read .*truncated, corrupt or not a checkpoint"):
        read_checkpoint(truncated)
    (tmp_path / "x.pth").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="must be a .npz .* or .safetensors"):
        read_checkpoint(tmp_path / "x.pth")
    with pytest.raises(CheckpointError, match="Checkpoint file not found"):
        read_checkpoint(tmp_path / "nope.npz")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x00" * 40)
    with pytest.raises(CheckpointError, match="could not be read"):
        read_checkpoint(bad)
    with pytest.raises(CheckpointError, match="Unknown checkpoint layout"):
        detect_layout({"foo/bar": np.zeros(1)})


def test_bad_arguments_are_named():
    model = _tiny()
    with pytest.raises(ValueError, match="`head` must be one of 'auto', 'load', 'reset'. Received: head='keep'"):
        load_pretrained(model, {}, head="keep")
    with pytest.raises(CheckpointError, match="`checkpoint` must be a file path"):
        load_pretrained(model, 3)
    with pytest.raises(CheckpointError, match="is not a keras_vit Vision Transformer"):
        import keras

        load_pretrained(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]), {})


# ----------------------------------------------------------------------------- heads

def test_head_policies(tmp_path, caplog):
    path = _save(tmp_path, reference.google_checkpoint(5, representation=24))
    caplog.set_level("WARNING", logger="keras_vit.weights")
    model = _tiny()
    with pytest.raises(CheckpointError, match=r"head='load' but the head cannot be loaded: the checkpoint's head has shape \(24, 5\), the model's \(32, 5\)"):
        load_pretrained(model, path, head="load")
    assert not caplog.records  # a failed load says nothing but its error
    report = load_pretrained(model, path)  # auto: the head does not fit behind a missing pre_logits
    assert report.head == "reset"
    assert [r.getMessage() for r in caplog.records] == report.messages
    messages = " | ".join(report.messages)
    assert "pre_logits (representation) layer is unused" in messages and "Head re-initialised to zeros" in messages
    assert not model.get_layer("predictions").kernel.numpy().any()

    with_rep = _tiny(representation_size=24)
    report = load_pretrained(with_rep, path)
    assert report.head == "loaded" and report.messages == []
    np.testing.assert_array_equal(with_rep.get_layer("pre_logits").kernel.numpy(),
                                  np.load(path)["pre_logits/kernel"])

    other_classes = _tiny(classes=7, representation_size=24)
    report = load_pretrained(other_classes, path)
    assert report.head == "reset" and "classes=7" in report.messages[-1]

    report = load_pretrained(_tiny(representation_size=24), path, head="reset")
    assert report.head == "reset" and "head='reset'" in report.messages[-1]

    no_top = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), include_top=False)
    report = load_pretrained(no_top, path)
    assert report.head == "none"
    assert any("head is unused" in m for m in report.messages)


def _zero_head(arrays):
    arrays["head/kernel"][:] = 0
    arrays["head/bias"][:] = 0
    return arrays


@pytest.mark.parametrize("arrays,why", [
    (lambda: _zero_head(reference.google_checkpoint(6)), "all zeros"),
    (lambda: reference.google_checkpoint(5, representation=32), "sits on its pre_logits layer"),  # model width
], ids=["zero_head", "head_on_dropped_pre_logits"])
def test_head_is_flagged_never_used_as_a_classifier(tmp_path, arrays, why):
    path = _save(tmp_path, arrays())
    report = load_pretrained(_tiny(), path)
    assert report.head == "reset" and why in report.messages[-1]
    with pytest.raises(CheckpointError, match=f"head='load' but the head cannot be loaded: .*{why}"):
        load_pretrained(_tiny(), path, head="load")


def test_missing_pre_logits_in_the_checkpoint_raises(tmp_path):
    path = _save(tmp_path, reference.google_checkpoint(0))
    with pytest.raises(CheckpointError, match="missing key 'pre_logits/kernel'"):
        load_pretrained(_tiny(representation_size=24), path)


# ----------------------------------------------------------------------------- resampling

def test_rectangular_grid_puts_height_and_width_on_the_right_axes():
    # A 2x3 source grid whose value is 10 * row + col: after resampling to 3x5 the rows must still vary
    # along height (first axis) and the columns along width.
    rows, cols = np.meshgrid(np.arange(2), np.arange(3), indexing="ij")
    pe = np.concatenate([[[-1.0]], (10 * rows + cols).reshape(6, 1)])[None].astype("float32")
    out = resample_position_embedding(pe, (3, 5), 1, source_grid=(2, 3))
    grid = out[0, 1:, 0].reshape(3, 5)
    assert out[0, 0, 0] == -1.0
    np.testing.assert_allclose(grid[:, 0], [0, 5, 10])
    np.testing.assert_allclose(grid[0], [0, 0.5, 1, 1.5, 2])


def test_bicubic_antialias_option_and_its_errors():
    pe = np.random.default_rng(0).standard_normal((1, 1 + 16, 8)).astype("float32")
    down = resample_position_embedding(pe, (2, 2), 1, interpolation="bicubic", antialias=True)
    assert down.shape == (1, 5, 8)
    np.testing.assert_array_equal(down[:, 0], pe[:, 0])
    with pytest.raises(ValueError, match="`antialias=True` needs interpolation='bicubic'"):
        resample_position_embedding(pe, (2, 2), 1, antialias=True)
    with pytest.raises(ValueError, match="do not form a square grid; pass `source_grid"):
        resample_position_embedding(pe[:, :-1], (2, 2), 1)
    with pytest.raises(ValueError, match=r"`source_grid` must be \(rows, cols\) with rows \* cols = 16"):
        resample_position_embedding(pe, (2, 2), 1, source_grid=(3, 5))
    with pytest.raises(ValueError, match=r"`num_prefix_tokens` must be 0, 1 or 2. Received: num_prefix_tokens=3"):
        resample_position_embedding(pe, (2, 2), 3)
    with pytest.raises(ValueError, match="`interpolation` must be one of 'bilinear', 'bicubic'"):
        resample_position_embedding(pe, (2, 2), 1, interpolation="nearest")


def test_model_without_class_token_resamples_every_row(tmp_path):
    arrays = reference.google_checkpoint(0, cls=False, grid=(4, 4))
    path = _save(tmp_path, arrays)
    model = keras_vit.VisionTransformer(**TINY, input_shape=(32, 32, 3), classifier="gap", classes=5)
    report = load_pretrained(model, path)
    assert report.resampled == ((4, 4), (8, 8))
    pe = model.get_layer("patch_encoder").position_embedding.numpy()
    expected = reference.zoom_patch_rows(arrays["Transformer/posembed_input/pos_embedding"], (4, 4), (8, 8))
    np.testing.assert_allclose(pe, expected, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- round trips

def test_fine_tuned_model_round_trip_full_and_backbone(tmp_path):
    model = _tiny()
    load_pretrained(model, _save(tmp_path, reference.google_checkpoint(8)))
    model.compile(optimizer="adam", loss=keras_losses())
    x, y = _x((8, 16, 16, 3)), np.arange(8) % 5
    model.fit(x, y, epochs=2, verbose=0)
    assert model.get_layer("predictions").kernel.numpy().any()
    path = save_checkpoint(model, tmp_path / "finetuned.npz")

    full = _tiny(weights=path)
    np.testing.assert_array_equal(full.predict(x, verbose=0), model.predict(x, verbose=0))

    backbone = _tiny()
    report = load_pretrained(backbone, path, head="reset")
    assert report.head == "reset" and "Head re-initialised to zeros" in report.messages[0]
    np.testing.assert_array_equal(backbone.predict(x, verbose=0), np.zeros((8, 5), np.float32))
    features = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), include_top=False, pooling="token")
    load_pretrained(features, path)
    sub = model.get_layer("pooling").output
    import keras

    reference_features = keras.Model(model.inputs, sub).predict(x, verbose=0)
    np.testing.assert_allclose(features.predict(x, verbose=0), reference_features, atol=1e-6)


def keras_losses():
    import keras

    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def test_save_checkpoint_refuses_to_overwrite_and_bad_names(tmp_path):
    model = _tiny()
    path = save_checkpoint(model, tmp_path / "a.npz")
    with pytest.raises(FileExistsError):
        save_checkpoint(model, path)
    with pytest.raises(ValueError, match="must end in '.npz'"):
        save_checkpoint(model, tmp_path / "a.h5")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.npz"]


# ----------------------------------------------------------------------------- found by a fresh user

def test_rectangular_model_round_trips_exactly(tmp_path, caplog):
    model = _tiny(input_shape=(8, 32, 3))  # a 2x8 grid: 16 patches, also a square number
    path = save_checkpoint(model, tmp_path / "rect.npz")
    again = _tiny(input_shape=(8, 32, 3))
    with caplog.at_level("WARNING", logger="keras_vit.weights"):
        report = load_pretrained(again, path)
    assert report.resampled is None and not [r for r in caplog.records if "Resampled" in r.getMessage()]
    np.testing.assert_array_equal(again.get_layer("patch_encoder").position_embedding.numpy(),
                                  model.get_layer("patch_encoder").position_embedding.numpy())


def test_arguments_checked_before_anything_else(tmp_path):
    path = _save(tmp_path, reference.google_checkpoint(0))
    with pytest.raises(ValueError, match="`interpolation` must be one of 'bilinear', 'bicubic'"):
        load_pretrained(_tiny(), path, interpolation="bogus")
    with pytest.raises(ValueError, match="`antialias=True` needs interpolation='bicubic'"):
        load_pretrained(_tiny(), path, antialias=True)
    no_top = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), include_top=False)
    with pytest.raises(CheckpointError, match=r"head='load' but the model has no head \(include_top=False\)"):
        load_pretrained(no_top, path, head="load")
    with pytest.raises(CheckpointError, match=r"source_grid"):
        load_pretrained(_tiny(input_shape=(32, 32, 3)), path, source_grid=4)
    arrays = reference.google_checkpoint(0)
    arrays["note"] = np.array("hello")
    with pytest.raises(CheckpointError, match="array 'note' has dtype <U5, not a real number type"):
        load_pretrained(_tiny(), _save(tmp_path, arrays, "s.npz"))


def test_checkpoint_names_win_over_a_folder_of_the_same_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "imagenet").mkdir()
    with pytest.raises(ValueError, match="weights='imagenet' needs one of the variant configurations"):
        _tiny(weights="imagenet")


def test_timm_fc_norm_gets_a_clear_message():
    arrays = {"patch_embed.proj.weight": np.zeros((32, 3, 4, 4)), "pos_embed": np.zeros((1, 17, 32)),
              "fc_norm.weight": np.ones(32), "fc_norm.bias": np.zeros(32)}
    with pytest.raises(CheckpointError, match="timm checkpoint has fc_norm"):
        load_pretrained(_tiny(), arrays)


@pytest.mark.parametrize("mode", ["int8", "int4"])
def test_a_keras_quantized_model_is_refused_both_ways(tmp_path, mode):
    """Checkpoints hold float weights; a model.quantize'd model stores integer codes and scales (writing them as
    weights, or loading floats over them, was silently wrong)."""
    model = _tiny()
    save_checkpoint(model, tmp_path / "float.npz")
    model.quantize(mode)
    before = _snapshot(model)
    with pytest.raises(CheckpointError, match=rf"was quantised with model.quantize \(\d+ {mode} layers, the first "):
        save_checkpoint(model, tmp_path / "q.npz")
    assert not (tmp_path / "q.npz").exists()
    with pytest.raises(CheckpointError, match=r"load_pretrained works on float models; .* quantise it after loading"):
        load_pretrained(model, str(tmp_path / "float.npz"))
    for a, b in zip(_snapshot(model), before):
        np.testing.assert_array_equal(a, b)
