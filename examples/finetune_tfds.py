"""Train a ViT on a TensorFlow Datasets data set (e.g. cifar10) with the paper's recipe.

    python examples/finetune_tfds.py cifar10 --epochs 50 --download

Without --download the data must already be in TFDS' data folder (~/tensorflow_datasets).
"""

import argparse

import keras

import keras_vit
from keras_vit import data, training


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="TFDS name with image and label features, e.g. cifar10")
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--validation-split", default="test")
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--download", action="store_true")
    parser.add_argument("--output", default="tfds_vit.keras")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    common = {"image_size": args.image_size, "batch_size": args.batch_size, "download": args.download}
    train = data.from_tfds(args.name, split=args.train_split, shuffle=True, augment="crop_flip", seed=0, **common)
    val = data.from_tfds(args.name, split=args.validation_split, **common)

    model = keras_vit.VisionTransformer(
        patch_size=4, hidden_size=192, num_layers=6, num_heads=3, mlp_dim=768,
        input_shape=(args.image_size, args.image_size, 3), classes=len(train.class_names),
        classifier_activation=None, stochastic_depth_rate=0.1,
    )
    steps = args.epochs * int(train.cardinality())
    training.compile_model(model, total_steps=steps, learning_rate=1e-3, warmup_steps=steps // 10, label_smoothing=0.1)
    # shuffle=False: the pipeline already shuffles (Keras' own shuffle does not apply to tf.data).
    history = model.fit(train, validation_data=val, epochs=args.epochs, verbose=2, shuffle=False)
    model.save(args.output)
    print(f"held-out accuracy {history.history['val_accuracy'][-1]:.3f}; saved {args.output}")
    return history


if __name__ == "__main__":
    main()
