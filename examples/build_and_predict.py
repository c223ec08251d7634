"""Build a ViT variant, preprocess a real photo and predict, as with keras.applications.

    python examples/build_and_predict.py --variant ViTB16

With weights=None the head is zero-initialised (paper Sec. 3.2), so every class
gets the same probability until the model is trained or pretrained weights land.
"""

import argparse

import numpy as np
from sklearn.datasets import load_sample_image

import keras_vit


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="ViTTi16", help="e.g. ViTTi16, ViTB16, ViTL16")
    parser.add_argument("--image-size", type=int, default=224)
    args = parser.parse_args(argv)

    model = getattr(keras_vit, args.variant)(weights=None, input_shape=(args.image_size, args.image_size, 3))
    print(f"{model.name}: {model.count_params():,} parameters, input {model.input_shape}, output {model.output_shape}")

    photo = load_sample_image("china.jpg")  # (427, 640, 3) uint8, a real photo shipped with scikit-learn
    side = min(photo.shape[:2])
    crop = photo[:side, :side]
    import tensorflow as tf

    image = tf.image.resize(crop[None], (args.image_size, args.image_size)).numpy()  # pixels in [0, 255]
    probs = model.predict(keras_vit.preprocess_input(image), verbose=0)  # [-1, 1] in, probabilities out
    top5 = np.argsort(probs[0])[::-1][:5]
    print("top-5 class indices:", top5.tolist(), "probabilities:", np.round(probs[0][top5], 5).tolist())
    return probs


if __name__ == "__main__":
    main()
