"""Look inside a ViT with the paper's tools (Sec. 4.5, Figures 6 and 7) on real digit scans.

    python examples/inspect_attention.py --output-dir figures/            # trains a small ViT on digits first
    python examples/inspect_attention.py --weights ViT-B_16.npz --image-size 224 --output-dir figures/

Writes four PNG files: rollout.png (attention rollout over held-out images),
attention_distance.png (mean attention distance per head and layer),
position_embedding_similarity.png and embedding_filters.png. With `--weights`
(a Google .npz or Hugging Face / timm .safetensors checkpoint) the model is
built from the checkpoint instead of trained.
"""

import argparse
import os

import keras
import numpy as np

import keras_vit
from keras_vit import data, inspect, training
from keras_vit.weights import infer_config, load_pretrained, read_checkpoint


def _model(args, classes):
    if args.weights:
        arrays = read_checkpoint(args.weights)
        config = infer_config(arrays)
        keys = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "representation_size",
                "classifier", "resnet_num_layers", "resnet_width_factor")
        build = {k: config[k] for k in keys if config[k] is not None and not (k == "resnet_width_factor"
                                                                               and not config["resnet_num_layers"])}
        size = args.image_size or config["image_size"] or 224
        model = keras_vit.VisionTransformer(**build, input_shape=(size, size, 3), include_top=False)
        load_pretrained(model, arrays)
        return model, size
    size = args.image_size or 32
    model = keras_vit.VisionTransformer(patch_size=4, hidden_size=64, num_layers=4, num_heads=4, mlp_dim=128,
                                        input_shape=(size, size, 3), classes=classes, classifier_activation=None)
    train = data.digits("train", image_size=size, shuffle=True, augment="crop", seed=0)
    steps = args.epochs * int(train.cardinality())
    training.compile_model(model, total_steps=steps, learning_rate=2e-3, warmup_steps=steps // 10)
    model.fit(train, epochs=args.epochs, verbose=2, shuffle=False)
    return model, size


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", help="checkpoint to inspect instead of training one")
    parser.add_argument("--image-size", type=int)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--images", type=int, default=6, help="held-out images shown in the rollout figure")
    parser.add_argument("--output-dir", default="figures")
    args = parser.parse_args(argv)
    if args.images < 1:
        parser.error(f"--images must be >= 1. Received: {args.images}")

    keras.utils.set_random_seed(0)
    model, size = _model(args, classes=10)
    images = np.concatenate([x for x, _ in data.digits("validation", image_size=size, batch_size=64)])
    shown = images[: args.images]
    os.makedirs(args.output_dir, exist_ok=True)
    out = lambda name: os.path.join(args.output_dir, name)  # noqa: E731
    distances = inspect.mean_attention_distance(model, images[:64])
    paths = [
        inspect.plot_attention_rollout(shown, inspect.attention_rollout(model, shown), out("rollout.png")),
        inspect.plot_mean_attention_distance(distances, out("attention_distance.png"), image_size=size),
        inspect.plot_position_embedding_similarity(inspect.position_embedding_similarity(model),
                                                   out("position_embedding_similarity.png")),
    ]
    if model.get_layer("patches").input.shape[-1] == 3:  # a hybrid's projection is not image-like
        paths.append(inspect.plot_embedding_filters(inspect.embedding_filters(model, 28 if size > 16 else 7),
                                                    out("embedding_filters.png")))
    print("mean attention distance (pixels), first and last layer:", distances[0].round(1), distances[-1].round(1))
    print("wrote", ", ".join(paths))
    return paths


if __name__ == "__main__":
    main()
