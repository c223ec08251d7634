"""Issue 27: the LayerNorm reparameterisation is exact on the float model, and balances the channels it claims to."""

import keras
import numpy as np
import pytest

import keras_vit
from export.reparameterize import EXACT_TOLERANCE, balance_layer_norms, check_exact

pytestmark = pytest.mark.export


def _vit(**kwargs):
    """A tiny ViT with trained-looking LayerNorms: gamma and beta of very different sizes per channel."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=8, hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64,
                                        input_shape=(16, 16, 3), classes=5, classifier_activation=None, **kwargs)
    rng = np.random.default_rng(0)
    for w in model.weights:
        if w.path.endswith(("gamma", "beta")) or "predictions" in w.path or "pre_logits" in w.path:
            spread = rng.uniform(0.05, 8, w.shape[-1:])
            w.assign((rng.normal(0, 1, w.shape) * spread).astype("float32"))
    return model


def _images(n, seed):
    return np.random.default_rng(seed).uniform(-1, 1, (n, 16, 16, 3)).astype("float32")


@pytest.mark.parametrize("kwargs", [{}, {"classifier": "gap"}, {"representation_size": 16}])
def test_the_rewrite_is_exact_and_leaves_the_original_alone(kwargs, recwarn):
    model = _vit(**kwargs)
    before = [w.copy() for w in model.get_weights()]
    calibration, held_out = _images(32, 1), _images(16, 2)
    balanced = balance_layer_norms(model, calibration)
    # measured quietly: Keras' "structure of `inputs` doesn't match" warning leaked into every int8 export's output
    assert not [w for w in recwarn if "structure of `inputs`" in str(w.message)]
    assert check_exact(model, balanced, held_out) <= EXACT_TOLERANCE  # on images it was not fitted on
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert [layer.name for layer in balanced.layers] == [layer.name for layer in model.layers]
    changed = [a.path for a, b in zip(model.weights, balanced.weights)
               if not np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))]
    assert all(p.endswith(("gamma", "beta", "kernel", "bias")) for p in changed) and len(changed) >= 2 * 5


def test_post_layer_norm_channels_end_up_with_one_symmetric_range():
    """What the rewrite is for: norm_1's output channels span 0.05x-8x of each other before, the same range after
    (on the calibration images), centred on 0, so one int8 scale fits them all."""
    model = _vit()
    calibration = _images(32, 1)
    balanced = balance_layer_norms(model, calibration)

    def norm_1_output(m):
        x = keras.Model(m.inputs, m.get_layer("transformer_block_0").input).predict(calibration, verbose=0)
        y = np.asarray(m.get_layer("transformer_block_0").norm_1(x)).reshape(-1, 32)
        return y.min(0), y.max(0)

    lo, hi = norm_1_output(model)
    assert (hi - lo).max() / (hi - lo).min() > 20
    lo, hi = norm_1_output(balanced)
    np.testing.assert_allclose(hi - lo, (hi - lo).mean(), rtol=1e-4)
    np.testing.assert_allclose(hi + lo, 0, atol=1e-4 * (hi - lo).mean())


def test_a_model_that_is_no_vit_with_a_head_is_refused():
    headless = keras_vit.VisionTransformer(patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                           input_shape=(16, 16, 3), include_top=False, pooling="token")
    with pytest.raises(ValueError, match="balance_layer_norms needs a keras_vit ViT with encoder blocks"):
        balance_layer_norms(headless, _images(4, 0))
    with pytest.raises(RuntimeError, match="not exact"):
        other = _vit()
        other.get_layer("predictions").set_weights([w + 1 for w in other.get_layer("predictions").get_weights()])
        check_exact(_vit(), other, _images(4, 0))
