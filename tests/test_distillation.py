"""DeiT's distilled ViT: the distillation token and head in the model, and `keras_vit.distillation.Distiller`.

Run on every Keras backend (tests/run_suite.py `BACKEND_TESTS`). The losses are checked against NumPy written
from the DeiT paper's Eq. 2 and 3; Hugging Face's implementation judges the model in tests/weights/test_deit_parity.py.
"""

import logging
import re

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.distillation import Distiller, distillation_term
from keras_vit.layers import DistilledHead, PatchEncoder, SequencePooling, model_class_names
from keras_vit.training import compile_model

TINY = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32)


def _student(classes=3, input_shape=(8, 8, 3), **kwargs):
    return keras_vit.VisionTransformer(**TINY, input_shape=input_shape, classes=classes, distillation_token=True,
                                       **kwargs)


def _teacher(classes=3, input_shape=(8, 8, 3), activation=None, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),
                             keras.layers.Dense(classes, activation=activation)], name="teacher")


def _np_log_softmax(z):
    z = np.asarray(z, "float64")
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def _randomise(model, seed=1, scale=0.3):
    rng = np.random.default_rng(seed)
    for w in model.weights:
        w.assign(rng.normal(0, scale, w.shape).astype("float32"))


# ----------------------------------------------------------------------------- the model


def test_the_distillation_token_follows_the_class_token_with_its_own_position_row():
    encoder = PatchEncoder(hidden_size=8, distillation_token=True, position_embedding="learned")
    patches = np.random.default_rng(0).normal(size=(2, 4, 12)).astype("float32")
    out = keras.ops.convert_to_numpy(encoder(patches))
    assert out.shape == (2, 6, 8) and encoder.prefix_tokens == 2
    assert encoder.position_embedding.shape == (1, 6, 8)
    table = np.asarray(encoder.position_embedding)[0]
    np.testing.assert_allclose(out[:, 0], np.broadcast_to(np.asarray(encoder.cls)[0, 0] + table[0], (2, 8)), atol=1e-6)
    np.testing.assert_allclose(out[:, 1], np.broadcast_to(np.asarray(encoder.dist)[0, 0] + table[1], (2, 8)), atol=1e-6)
    assert np.abs(np.asarray(encoder.dist)).max() > 0  # DeiT's truncated-normal init, not zeros
    again = PatchEncoder.from_config(encoder.get_config())
    assert again.distillation_token and again.get_config() == encoder.get_config()
    with pytest.raises(ValueError, match="distillation_token=True.*needs one. Received: class_token=False"):
        PatchEncoder(hidden_size=8, class_token=False, distillation_token=True)


def test_pooling_with_a_distillation_token():
    x = np.arange(2 * 5 * 3, dtype="float32").reshape(2, 5, 3)
    np.testing.assert_array_equal(SequencePooling("tokens", distillation_token=True)(x), x[:, :2])
    np.testing.assert_array_equal(SequencePooling("token", distillation_token=True)(x), (x[:, 0] + x[:, 1]) / 2)
    np.testing.assert_array_equal(SequencePooling("avg", distillation_token=True)(x), x[:, 2:].mean(1))
    np.testing.assert_array_equal(SequencePooling("max", distillation_token=True)(x), x[:, 2:].max(1))
    with pytest.raises(ValueError, match="mode='tokens'.*needs distillation_token=True"):
        SequencePooling("tokens")


def test_the_head_averages_the_two_heads_logits_then_applies_the_activation():
    head = DistilledHead(4, activation="softmax", kernel_initializer="glorot_uniform", bias_initializer="ones")
    x = np.random.default_rng(0).normal(size=(3, 2, 5)).astype("float32")
    out = keras.ops.convert_to_numpy(head(x))
    w, b = np.asarray(head.kernel), np.asarray(head.bias)
    wd, bd = np.asarray(head.distillation_kernel), np.asarray(head.distillation_bias)
    logits = ((x[:, 0] @ w + b) + (x[:, 1] @ wd + bd)) / 2
    np.testing.assert_allclose(out, np.exp(_np_log_softmax(logits)), atol=1e-6)
    assert isinstance(head, keras.layers.Dense)  # a classifier head for export's score kinds and the class names
    with pytest.raises(ValueError, match=r"\(batch, 2, hidden_size\). Received: input_shape=\(None, 5\)"):
        DistilledHead(4).build((None, 5))


def test_a_distilled_model_saves_loads_and_resizes(tmp_path):
    model = _student(class_names=["a", "b", "c"])
    _randomise(model)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 8, 8, 3)).astype("float32")
    path = str(tmp_path / "deit.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))
    assert model_class_names(loaded) == ["a", "b", "c"]
    bigger = keras_vit.resize(model, (16, 16, 3))
    encoder = bigger.get_layer("patch_encoder")
    np.testing.assert_array_equal(np.asarray(encoder.dist), np.asarray(model.get_layer("patch_encoder").dist))
    assert encoder.position_embedding.shape == (1, 2 + 16, 16)
    np.testing.assert_array_equal(np.asarray(encoder.position_embedding)[0, :2],
                                  np.asarray(model.get_layer("patch_encoder").position_embedding)[0, :2])
    assert bigger.predict(np.zeros((1, 16, 16, 3), "float32"), verbose=0).shape == (1, 3)
    features = keras_vit.VisionTransformer(**TINY, input_shape=(8, 8, 3), include_top=False, pooling="token",
                                           distillation_token=True)
    assert features.output_shape == (None, 16)


def test_distilled_model_arguments_are_checked():
    with pytest.raises(ValueError, match="needs classifier='token'. Received: classifier='gap'"):
        _student(classifier="gap")
    with pytest.raises(ValueError, match="no pre-logits layer.*Received: representation_size=8"):
        _student(representation_size=8)


def test_the_distillation_token_gets_no_weight_decay_and_the_second_head_does():
    # DeiT's no_weight_decay: pos_embed, cls_token, dist_token (and every bias and norm, as for the class head)
    student = _student()
    compile_model(student, total_steps=1, weight_decay=0.05)
    decayed = {v.name: student.optimizer._use_weight_decay(v) for v in student.trainable_variables}
    assert decayed["distillation_token"] is False and decayed["class_token"] is False
    assert decayed["distillation_kernel"] is True and decayed["kernel"] is True
    assert decayed["distillation_bias"] is False


@pytest.mark.backend_independent
def test_deit_b_distilled_parameter_count():
    # DeiT-B with distillation: 87,338,192 parameters (timm's deit_base_distilled_patch16_224 and Hugging Face's
    # DeiTForImageClassificationWithTeacher at the same size: ViT-B/16's 86,567,656 + a token, a position row, a head)
    assert keras_vit.ViTB16(distillation_token=True).count_params() == 87_338_192


# ----------------------------------------------------------------------------- the losses


@pytest.mark.parametrize("distillation,temperature", [("hard", 1.0), ("soft", 1.0), ("soft", 3.0)])
def test_distillation_term_against_the_papers_equations(distillation, temperature):
    rng = np.random.default_rng(3)
    student, teacher = rng.normal(0, 2, (6, 5)).astype("float32"), rng.normal(0, 2, (6, 5)).astype("float32")
    ours = keras.ops.convert_to_numpy(distillation_term(student, teacher, distillation, temperature))
    if distillation == "hard":  # Eq. 3: cross-entropy with the teacher's decision
        expected = -_np_log_softmax(student)[np.arange(6), teacher.argmax(1)]
    else:  # Eq. 2: T^2 KL(psi(Z_t / T) || psi(Z_s / T)), per image
        p, q = _np_log_softmax(teacher / temperature), _np_log_softmax(student / temperature)
        expected = temperature ** 2 * (np.exp(p) * (p - q)).sum(1)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_the_loss_mixes_the_label_term_and_the_teacher_term():
    student, teacher = _student(), _teacher(activation="softmax")
    _randomise(student, seed=4)
    distiller = Distiller(student, teacher, distillation="soft", temperature=2.0, alpha=0.3)
    compile_model(distiller, total_steps=1, from_logits=True, label_smoothing=0.1)
    x = np.random.default_rng(5).uniform(-1, 1, (4, 8, 8, 3)).astype("float32")
    y = np.eye(3, dtype="float32")[[0, 2, 1, 1]] * 0.7 + 0.1  # Mixup's soft labels (rows sum to 1)
    both = distiller(x)
    loss = float(keras.ops.convert_to_numpy(distiller.compute_loss(x, y, both, training=False)))
    both = keras.ops.convert_to_numpy(both).astype("float64")
    smoothed = y * 0.9 + 0.1 / 3
    label_term = -(smoothed * _np_log_softmax(both[:, 0])).sum(1).mean()
    teacher_log = np.log(keras.ops.convert_to_numpy(teacher(x)).astype("float64"))  # probabilities -> logits
    p, q = _np_log_softmax(teacher_log / 2.0), _np_log_softmax(both[:, 1] / 2.0)
    teacher_term = (4.0 * (np.exp(p) * (p - q)).sum(1)).mean()
    np.testing.assert_allclose(loss, 0.7 * label_term + 0.3 * teacher_term, rtol=1e-5)
    # with sample weights: the compiled label loss divides by the batch, the teacher term by the weights' sum
    w = np.array([1.0, 0.0, 2.0, 1.0], "float32")
    weighted = float(keras.ops.convert_to_numpy(distiller.compute_loss(x, y, distiller(x), sample_weight=w,
                                                                       training=False)))
    label_terms = -(smoothed * _np_log_softmax(both[:, 0])).sum(1)
    teacher_terms = 4.0 * (np.exp(p) * (p - q)).sum(1)
    np.testing.assert_allclose(weighted, 0.7 * (w * label_terms).sum() / 4 + 0.3 * (w * teacher_terms).sum() / w.sum(),
                               rtol=1e-5)
    # the student's own output (what is saved and exported) is the softmax of the two heads' mean
    np.testing.assert_allclose(keras.ops.convert_to_numpy(student(x)), np.exp(_np_log_softmax(both.mean(1))),
                               atol=1e-6)


def test_fit_trains_the_distillation_head_toward_the_teacher_and_leaves_the_teacher(caplog):
    student, teacher = _student(), _teacher()
    teacher_weights = [np.array(w) for w in teacher.get_weights()]
    with caplog.at_level(logging.WARNING, logger="keras_vit.distillation"):
        distiller = Distiller(student, teacher, alpha=1.0)  # the teacher's term only
    assert any("is frozen (trainable=False)" in r.getMessage() for r in caplog.records)
    assert not teacher.trainable and len(distiller.trainable_weights) == len(student.trainable_weights)
    compile_model(distiller, total_steps=60, learning_rate=1e-2, from_logits=True)
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (96, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 3, 96)  # labels unrelated to the teacher: the class head must not learn them at alpha=1
    decisions = keras.ops.convert_to_numpy(teacher(x)).argmax(1)
    distiller.fit(x, y, batch_size=32, epochs=20, verbose=0)
    both = keras.ops.convert_to_numpy(distiller(x))
    assert (both[:, 1].argmax(1) == decisions).mean() >= 0.9
    head = student.get_layer("predictions")
    assert not np.any(keras.ops.convert_to_numpy(head.kernel))  # zero-initialised, no gradient at alpha=1
    for before, after in zip(teacher_weights, teacher.get_weights()):
        np.testing.assert_array_equal(before, after)
    assert distiller.jit_compile == (keras.backend.backend() != "torch")  # XLA held on TensorFlow and JAX


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the teacher runs apart on TensorFlow only")
def test_the_teacher_run_apart_from_the_xla_step_gives_the_same_step_as_inside_it():
    """On TensorFlow with XLA the teacher runs before the XLA-compiled student step (its depthwise convolutions
    are slow under XLA on CPUs): the losses, metrics and weights after each step equal the step that runs it
    inside (without XLA), and the teacher is not in the XLA function."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-1, 1, (64, 8, 8, 3)).astype("float32")
    y = rng.integers(0, 3, 64)
    ends = {}
    for jit in (True, False):
        student, teacher = _student(), _teacher(seed=3)
        _randomise(student, seed=8, scale=0.1)
        distiller = Distiller(student, teacher)  # hard distillation, alpha 1/2
        compile_model(distiller, total_steps=4, learning_rate=1e-2, from_logits=True, jit_compile=jit)
        assert distiller._teacher_apart() == jit
        history = distiller.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history
        if jit:  # the XLA-compiled step holds the student's ops and none of the teacher's
            step = distiller.__dict__["_xla_steps"]["train_step"]
            ops_run = [op.name for op in step.get_concrete_function(
                (x[:16], np.zeros((16, 3), "float32")), y[:16], None).graph.get_operations()]
            assert any(student.name in name for name in ops_run)
            assert not any(teacher.name in name for name in ops_run)
        ends[jit] = (history, distiller.evaluate(x, y, batch_size=16, verbose=0, return_dict=True),
                     [np.array(w) for w in student.weights])
    assert distiller.jit_compile is False and ends[True][0]["loss"][0] > 0
    for a, b in zip(ends[True][:2], ends[False][:2]):
        assert a.keys() == b.keys()
        np.testing.assert_allclose([np.ravel(a[k])[0] for k in a], [np.ravel(b[k])[0] for k in b], rtol=2e-5)
    for a, b in zip(ends[True][2], ends[False][2]):
        np.testing.assert_allclose(a, b, atol=2e-6)


def test_bad_teachers_and_settings_are_refused_before_training():
    student = _student()
    with pytest.raises(ValueError, match="teacher 'teacher' has 4 classes, the student 'vision_transformer' 3"):
        Distiller(student, _teacher(classes=4))
    with pytest.raises(ValueError, match=r"teacher 'teacher' takes images of shape \(16, 16, 3\), the student "
                                         r"'vision_transformer' \(8, 8, 3\)"):
        Distiller(student, _teacher(input_shape=(16, 16, 3)))
    plain = keras_vit.VisionTransformer(**TINY, input_shape=(8, 8, 3), classes=3)
    with pytest.raises(ValueError, match="has no distillation head: build it with.*distillation_token=True"):
        Distiller(plain, _teacher())
    with pytest.raises(ValueError, match="`distillation` must be one of"):
        Distiller(student, _teacher(), distillation="kl")
    for temperature in (0, float("nan"), float("inf"), 1e20, 100.5):  # T^2 of 1e20 is a NaN loss in float32
        with pytest.raises(ValueError, match=r"`temperature` must be a float in \(0, 100\]. Received: "
                                             + re.escape(f"temperature={temperature!r}")):
            Distiller(student, _teacher(), temperature=temperature)
    assert Distiller(student, _teacher(), temperature=100).temperature == 100.0
    assert Distiller(student, _teacher(), temperature=np.float32(2.0)).temperature == 2.0  # NumPy's floats pass
    with pytest.raises(ValueError, match=r"`alpha` must be a float in \[0, 1\]. Received: alpha=1.5"):
        Distiller(student, _teacher(), alpha=1.5)
    with pytest.raises(ValueError, match="Cannot tell whether 'teacher' gives logits.*pass teacher_from_logits=True"):
        Distiller(student, _teacher(activation="sigmoid"))
    softmax_layer = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(), keras.layers.Dense(3),
                                      keras.layers.Softmax()], name="teacher")
    assert Distiller(student, softmax_layer).teacher_from_logits is False  # probabilities, as from activation="softmax"
    assert Distiller(student, _teacher(activation="softmax")).teacher_from_logits is False
    images = keras.Input((8, 8, 3))
    nested = keras.Model(images, _teacher(activation="softmax")(images), name="teacher")  # softmax inside
    assert Distiller(student, nested).teacher_from_logits is False
    op_softmax = keras.Model(images, keras.ops.softmax(_teacher()(images)), name="teacher")  # keras.ops.softmax
    assert Distiller(student, op_softmax).teacher_from_logits is False
    assert Distiller(student, keras.Model(images, _teacher()(images), name="teacher")).teacher_from_logits is True
    assert Distiller(student, _teacher()).teacher_from_logits is True
