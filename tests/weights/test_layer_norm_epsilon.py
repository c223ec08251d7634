"""LayerNorm epsilon 1e-6 (keras_vit, the JAX originals) against 1e-12 (Hugging Face configs): the logits' change.

Hugging Face ViT checkpoints were trained with `layer_norm_eps=1e-12`; keras_vit loads them with 1e-6. The same
weights are run at both epsilons, in keras_vit and in the float64 NumPy forward pass of tests/weights/reference.py.
Each normalised value changes by about eps / (2 variance) of its LayerNorm input, so the change depends on the
weights: small where every weight is random at the scale of the parity tests, larger from keras_vit's fresh
initialisation, whose zero class token meets the first LayerNorm with only the position embedding's variance
(N(0, 0.02^2): about 4e-4). Trained checkpoints cannot be downloaded here and were not measured.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import save_checkpoint
from tests.weights import reference


def _images(n):
    return np.random.default_rng(1).uniform(-1, 1, (n, 224, 224, 3)).astype("float32")


def _logit_change(ours, theirs, x):
    theirs.set_weights(ours.get_weights())
    return ours.predict(x, verbose=0) - theirs.predict(x, verbose=0)


@pytest.mark.parametrize("variant,images", [("ViTTi16", 2), pytest.param("ViTB16", 1, marks=pytest.mark.slow)])
def test_hugging_face_epsilon_changes_the_logits_by_the_measured_amount(variant, images, tmp_path):
    builder = getattr(keras_vit, variant)
    keras.utils.set_random_seed(0)  # the fresh initialisation is random too
    ours = builder(classifier_activation=None)
    assert {layer.epsilon for layer in ours.layers if hasattr(layer, "epsilon")} <= {1e-6}
    theirs = builder(classifier_activation=None, layer_norm_epsilon=1e-12)
    rng = np.random.default_rng(0)
    head = ours.get_layer("predictions")  # zero-initialised: give it values (timm's head init scale)
    head.kernel.assign(rng.normal(0.0, 0.02, head.kernel.shape).astype("float32"))
    x = _images(images)

    # keras_vit's fresh initialisation: measured 3.5e-4 (ViT-Ti/16, 2 images, logits up to 0.88) and 7.8e-4
    # (ViT-B/16, 1 image, logits up to 1.7); 2.7e-4 to 8.3e-4 over three seeds.
    change = _logit_change(ours, theirs, x)
    arrays = dict(np.load(save_checkpoint(ours, tmp_path / "w.npz")))
    expected = reference.forward(arrays, x, layers=12, eps=1e-6) - reference.forward(arrays, x, layers=12, eps=1e-12)
    assert 1e-4 < np.abs(change).max() <= 1.5e-3
    np.testing.assert_allclose(change, expected, atol=1e-5, rtol=0)  # measured 9.9e-7 (Ti), 2.5e-6 (B)

    # Every weight random as in test_parity.py (matrices N(0, 0.02^2), the rest N(0, 0.2^2)): measured 2.1e-7
    # (Ti) and 3.8e-7 (B), at float32 rounding.
    for v in ours.weights:
        v.assign(rng.normal(0.0, 0.02 if len(v.shape) > 1 and "position" not in v.path else 0.2, v.shape)
                 .astype("float32"))
    assert np.abs(_logit_change(ours, theirs, x)).max() <= 2e-6
