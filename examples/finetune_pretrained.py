"""Fine-tune a pretrained ViT checkpoint at a higher resolution than it was pre-trained at (paper Sec. 3.2).

    python examples/finetune_pretrained.py ViT-B_16.npz --image-size 384 --data folder --folder photos/
    python examples/finetune_pretrained.py vit_small.safetensors --data digits

The checkpoint is a Google `.npz` (original, AugReg or big_vision) or a
Hugging Face / timm `.safetensors` file. The recipe of the paper: the
pre-trained head is dropped and a zero-initialised one attached for the new
classes, the position embeddings are 2D-interpolated to the new patch grid,
and the model is trained with SGD, momentum 0.9, no weight decay, gradients
clipped at norm 1 and a cosine schedule (Appendix B.1.1).

Where to get a checkpoint (on a machine with network access), for example:

    wget https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz
    wget https://storage.googleapis.com/vit_models/augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0.npz

or run with a name from `keras_vit.weights.CHECKPOINTS` (e.g.
"augreg/S_16-i21k"), which downloads it once with a SHA-256 check.
`--list` prints every name and URL.
"""

import argparse

import keras

import keras_vit
from keras_vit import data, training
from keras_vit.models.resnet import output_stride
from keras_vit.weights import CHECKPOINTS, fetch, infer_config, load_pretrained, read_checkpoint


def _list():
    for name, c in sorted(CHECKPOINTS.items()):
        print(f"{name:34s} {c.variant:8s} {c.image_size} px  {c.url}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", nargs="?", help=".npz / .safetensors path, or a name from --list")
    parser.add_argument("--list", action="store_true", help="list the published checkpoints and their URLs")
    parser.add_argument("--image-size", type=int, help="fine-tuning resolution (default: 1.7x the checkpoint's)")
    parser.add_argument("--data", choices=("digits", "folder"), default="digits")
    parser.add_argument("--folder", help="with --data folder: one sub-folder per class")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--num-heads", type=int, help="attention heads, for PyTorch files of an unusual width")
    parser.add_argument("--output", default="finetuned_vit.keras")
    args = parser.parse_args(argv)
    if args.list or not args.checkpoint:
        _list()
        return None

    path = fetch(CHECKPOINTS[args.checkpoint]) if args.checkpoint in CHECKPOINTS else args.checkpoint
    arrays = read_checkpoint(path)
    config = infer_config(arrays, num_heads=args.num_heads)
    stride = output_stride(config["resnet_num_layers"]) if config["resnet_num_layers"] else 1
    cell = config["patch_size"] * stride  # pixels per patch (a hybrid's ResNet downsamples first)
    if args.image_size is None:  # the paper goes 224 -> 384 (x1.7); round to whole patches
        args.image_size = round((config["image_size"] or 224) * 384 / 224 / cell) * cell

    keras.utils.set_random_seed(0)
    if args.data == "digits":
        common = {"image_size": args.image_size, "batch_size": args.batch_size}
        train = data.digits("train", shuffle=True, augment="crop", seed=0, **common)
        val = data.digits("validation", **common)
    else:
        split = {"validation_split": 0.2, "seed": 0, "image_size": args.image_size, "batch_size": args.batch_size}
        train = data.from_directory(args.folder, subset="training", shuffle=True, augment="crop_flip", **split)
        val = data.from_directory(args.folder, subset="validation", **split)

    hybrid = {k: config[k] for k in ("resnet_num_layers", "resnet_width_factor")} if config["resnet_num_layers"] else {}
    model = keras_vit.VisionTransformer(
        **{k: config[k] for k in ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim", "classifier")},
        **hybrid,
        input_shape=(args.image_size, args.image_size, config["channels"]),
        classes=len(train.class_names),
        classifier_activation=None,
    )
    # Drops the old head (zero-initialised new one) and resamples the position embeddings; both are logged.
    report = load_pretrained(model, arrays, head="reset")  # num_heads is the model's
    print(f"loaded a {report.layout} checkpoint; position grid {report.resampled or 'unchanged'}")

    steps = args.epochs * int(train.cardinality())
    training.compile_model(model, total_steps=steps, optimizer="sgd", learning_rate=args.learning_rate,
                           momentum=0.9, weight_decay=0.0, warmup_steps=steps // 10)
    history = model.fit(train, validation_data=val, epochs=args.epochs, verbose=2, shuffle=False)
    model.save(args.output)
    print(f"held-out accuracy {history.history['val_accuracy'][-1]:.3f} at {args.image_size} px; saved {args.output}")
    return history


if __name__ == "__main__":
    main()
