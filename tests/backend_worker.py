"""Runs keras_vit's model side under one Keras backend and writes the numbers (tests/test_backends.py).

Usage: KERAS_BACKEND=jax|torch|tensorflow python -m tests.backend_worker DIR

DIR holds what the TensorFlow-backend test wrote: `inputs.npz` (images,
labels), `vit_ti16.keras` and `hybrid.keras` (saved on TensorFlow, head
non-zero) and `tiny.weights.h5` (the starting weights of the training run).
The worker writes `DIR/<backend>/`: `numbers.npz` (logits, attention weights,
rollout, training losses and final weights, quantised logits),
`trained.keras` (the tiny model after training here), `quantized_int8.keras`
and `info.json`. Each backend runs in its own process, since Keras picks its
backend once, at import.
"""

import json
import os
import sys

import keras
import numpy as np

import keras_vit
from keras_vit import inspect as vit_inspect
from keras_vit import training

TINY = dict(patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, input_shape=(16, 16, 3), classes=5)
STEPS = 5  # training steps on one fixed batch, dropout off
QUANTIZATIONS = ("int8", "int4")


def tiny_model():
    """The tiny ViT the training run starts from, dropout off (its weights come from tiny.weights.h5)."""
    return keras_vit.VisionTransformer(**TINY, dropout_rate=0.0, attention_dropout_rate=0.0, name="tiny")


def compile_tiny(model):
    """The project recipe: AdamW with the weight-decay exclusions, warm-up then cosine decay, global-norm clipping at 1.

    Clipping acts: the first gradient's global norm is 1.26 (measured on JAX), above the clip norm 1."""
    return training.compile_model(model, total_steps=STEPS, learning_rate=1e-2, warmup_steps=2, weight_decay=0.1,
                                  global_clipnorm=1.0)


def train(model, images, labels):
    """STEPS full-batch steps (one step an epoch, no shuffle): returns the loss of each step."""
    history = model.fit(images, labels, batch_size=len(images), epochs=STEPS, shuffle=False, verbose=0)
    return np.asarray(history.history["loss"], dtype="float64")


def main(directory):
    backend = keras.backend.backend()
    out = os.path.join(directory, backend)
    os.makedirs(out, exist_ok=True)
    inputs = np.load(os.path.join(directory, "inputs.npz"))
    big, small, labels = inputs["big"], inputs["small"], inputs["labels"]
    numbers = {}

    vit = keras.saving.load_model(os.path.join(directory, "vit_ti16.keras"))  # saved on TensorFlow
    numbers["vit_logits"] = keras.ops.convert_to_numpy(vit.predict(big, verbose=0))
    attentions = vit_inspect.attention_weights(vit, big)
    for i, a in enumerate(attentions):
        numbers[f"vit_attention_{i}"] = a
    numbers["vit_rollout"] = vit_inspect.attention_rollout(vit, big)
    hybrid = keras.saving.load_model(os.path.join(directory, "hybrid.keras"))
    numbers["hybrid_logits"] = keras.ops.convert_to_numpy(hybrid.predict(inputs["hybrid"], verbose=0))

    model = tiny_model()
    model.load_weights(os.path.join(directory, "tiny.weights.h5"))
    compile_tiny(model)
    numbers["losses"] = train(model, small, labels)
    for variable in model.trainable_variables:
        numbers[f"trained/{variable.path}"] = keras.ops.convert_to_numpy(variable)
    numbers["trained_logits"] = keras.ops.convert_to_numpy(model.predict(small, verbose=0))
    model.save(os.path.join(out, "trained.keras"))
    info = {"backend": backend, "jit_compile": bool(model.jit_compile), "tensorflow_imported": "tensorflow" in sys.modules}

    from keras_vit import data  # tf.data pipelines, which Keras takes on every backend

    pipeline = data.from_arrays(((small + 1) * 127.5).round().astype("uint8"), labels, image_size=16, batch_size=4)
    info["tf_data_loss"] = float(model.fit(pipeline, epochs=1, verbose=0).history["loss"][0])

    for mode in QUANTIZATIONS:  # Keras' own quantisation of a copy of the trained model
        quantized = keras.saving.load_model(os.path.join(out, "trained.keras"))
        quantized.quantize(mode)
        numbers[f"quantized_{mode}_logits"] = keras.ops.convert_to_numpy(quantized.predict(small, verbose=0))
        path = os.path.join(out, f"quantized_{mode}.keras")
        quantized.save(path)
        again = keras.saving.load_model(path)
        numbers[f"quantized_{mode}_reloaded_logits"] = keras.ops.convert_to_numpy(again.predict(small, verbose=0))
    np.savez(os.path.join(out, "numbers.npz"), **numbers)
    with open(os.path.join(out, "info.json"), "w") as f:
        json.dump(info, f)


if __name__ == "__main__":
    main(sys.argv[1])
