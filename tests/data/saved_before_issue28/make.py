"""Made these `.keras` files with the code of commit 6900a49, before issue 28 moved the modules into
folders; tests/test_saved_before_move.py loads them with today's code. Kept to show how they were made:
rerunning it makes files of the code that runs it, which is not the point of the test.

    python tests/data/saved_before_issue28/make.py
"""

import pathlib

import numpy as np

import keras
import keras_vit
from keras_vit.pretraining import MaskedPatchPrediction, compile_pretraining
from keras_vit.training import compile_model

HERE = pathlib.Path(__file__).resolve().parent
TINY = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16)


def main():
    keras.utils.set_random_seed(0)
    images = np.random.default_rng(0).uniform(0, 255, (4, 16, 16, 3)).astype("float32")
    labels = np.array([0, 1, 2, 1])
    outputs = {"images": images}

    classifier = keras_vit.VisionTransformer(
        **TINY, input_shape=(16, 16, 3), classes=3, include_preprocessing=True,
        class_names=["cat", "dog", "fox"], name="classifier")
    compile_model(classifier, total_steps=4, label_smoothing=0.1, jit_compile=False)
    classifier.fit(images, labels, batch_size=2, epochs=1, verbose=0)  # optimizer state saved too
    classifier.save(HERE / "classifier.keras")
    outputs["classifier"] = classifier.predict(images, verbose=0)

    hybrid = keras_vit.VisionTransformer(
        **TINY, input_shape=(32, 32, 3), classes=2, resnet_num_layers=(1,), name="hybrid")
    hybrid.save(HERE / "hybrid.keras")
    hybrid_images = np.random.default_rng(1).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    outputs["hybrid_images"] = hybrid_images
    outputs["hybrid"] = hybrid.predict(hybrid_images, verbose=0)

    backbone = keras_vit.VisionTransformer(**TINY, input_shape=(16, 16, 3), include_top=False)
    pretraining = MaskedPatchPrediction(backbone, target="mean_color")
    compile_pretraining(pretraining, total_steps=4, jit_compile=False)
    corruption = np.array([[0, 1, 2, 3] * 4] * 4, dtype="int32")
    source = np.zeros((4, 16), dtype="int32")
    pretraining({"images": images[:1] / 127.5 - 1, "corruption": corruption[:1], "source": source[:1]})
    pretraining.save(HERE / "pretraining.keras")
    inputs = {"images": images / 127.5 - 1, "corruption": corruption, "source": source}
    outputs["pretraining"] = keras.ops.convert_to_numpy(pretraining(inputs))
    outputs["corruption"], outputs["source"] = corruption, source
    np.savez(HERE / "outputs.npz", **outputs)


if __name__ == "__main__":
    main()
