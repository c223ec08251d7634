"""Train a ViT on your own photos: a folder with one sub-folder per class.

    python examples/finetune_image_folder.py photos/ --epochs 30

photos/cat/*.jpg, photos/dog/*.jpg, ... ; 20% of the images are held out.
"""

import argparse

import keras

import keras_vit
from keras_vit import data, training


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--output", default="image_folder_vit.keras")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(0)
    split = {"validation_split": 0.2, "seed": 0, "image_size": args.image_size, "batch_size": args.batch_size}
    train = data.from_directory(args.folder, subset="training", shuffle=True, augment="crop_flip", **split)
    val = data.from_directory(args.folder, subset="validation", **split)

    model = keras_vit.VisionTransformer(
        patch_size=8, hidden_size=128, num_layers=6, num_heads=4, mlp_dim=256,
        input_shape=(args.image_size, args.image_size, 3), classes=len(train.class_names),
        classifier_activation=None, stochastic_depth_rate=0.1,
    )
    steps = args.epochs * int(train.cardinality())
    training.compile_model(model, total_steps=steps, learning_rate=1e-3, warmup_steps=steps // 10)
    # shuffle=False: the pipeline already shuffles (Keras' own shuffle does not apply to tf.data).
    history = model.fit(train, validation_data=val, epochs=args.epochs, verbose=2, shuffle=False)
    model.save(args.output)
    print(f"held-out accuracy {history.history['val_accuracy'][-1]:.3f}; classes {train.class_names}; saved {args.output}")
    return history


if __name__ == "__main__":
    main()
