"""Images per second read from an image folder: keras_vit.data.from_directory vs Keras' own loader.

Writes a folder of JPEG and PNG photo crops (scikit-learn's two sample photos, no download; every JPEG
carries an EXIF Orientation tag of 6, as a phone's portrait photo does), then times whole epochs of
`keras_vit.data.from_directory` (its own decoders, EXIF orientation applied, antialiased resize), of the
same with `exif_orientation=False` (issue 43: what reading and applying the tag costs), and of
`keras.utils.image_dataset_from_directory` (TensorFlow's default decoders, no orientation, plain bilinear
resize), which keras_vit wrapped before it decoded files itself. Prints a table; asserts nothing.

    python -m benchmarks.image_folder [--images 400] [--size 400] [--image-size 32 224] [--epochs 3]
"""

import argparse
import os
import statistics
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def write_folder(root, images, size):
    """`images` crops of `size` x `size` pixels, half JPEG (quality 90, EXIF Orientation 6), half PNG, in two
    class folders."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    portrait = Image.Exif()
    portrait[0x0112] = 6  # stored sideways: turn 90 degrees clockwise
    rng = np.random.default_rng(0)
    for c in range(2):
        os.makedirs(os.path.join(root, f"class_{c}"))
    for i in range(images):
        photo = photos[i % 2]
        top, left = rng.integers(0, photo.shape[0] - size), rng.integers(0, photo.shape[1] - size)
        crop = Image.fromarray(photo[top : top + size, left : left + size])
        path = os.path.join(root, f"class_{i % 2}", f"{i}.{'jpg' if i % 4 < 2 else 'png'}")
        crop.save(path, quality=90, exif=portrait.tobytes()) if path.endswith(".jpg") else crop.save(path)


def epoch_seconds(ds, epochs):
    """Wall and process CPU seconds per epoch (after a warm-up epoch): medians, and all wall times.

    CPU seconds (all threads) are the steadier figure on a machine shared with other work.
    """
    for _ in ds:
        pass
    wall, cpu = [], []
    for _ in range(epochs):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in ds:
            pass
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return statistics.median(wall), statistics.median(cpu), wall


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=400, help="number of files (default 400)")
    parser.add_argument("--size", type=int, default=400, help="side of each stored image in pixels (default 400)")
    parser.add_argument("--image-size", type=int, nargs="+", default=[32, 224], help="input sizes to time")
    parser.add_argument("--epochs", type=int, default=3, help="timed epochs per pipeline (default 3)")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args(argv)
    if args.images < 2 or not 16 <= args.size <= 420 or args.epochs < 1 or min(args.image_size) < 1:
        parser.error("need --images >= 2, 16 <= --size <= 420 (the sample photos are 427 x 640), --epochs >= 1")

    import keras

    from keras_vit import data

    with tempfile.TemporaryDirectory() as root:
        write_folder(root, args.images, args.size)
        print(f"{args.images} files ({args.size} x {args.size}, half JPEG with EXIF Orientation 6, half PNG), batch {args.batch_size}, "
              f"median of {args.epochs} epochs after one warm-up; {os.cpu_count()} CPUs")
        print(f"{'image_size':>10}  {'pipeline':<56}{'images/s':>10}{'CPU ms/image':>14}  epochs (s)")
        for image_size in args.image_size:
            pipelines = {
                "keras_vit.data.from_directory": data.from_directory(
                    root, image_size=image_size, batch_size=args.batch_size
                ),
                "keras_vit.data.from_directory(exif_orientation=False)": data.from_directory(
                    root, image_size=image_size, batch_size=args.batch_size, exif_orientation=False
                ),
                "keras.utils.image_dataset_from_directory": keras.utils.image_dataset_from_directory(
                    root, image_size=(image_size, image_size), batch_size=args.batch_size, shuffle=False,
                    verbose=False,
                ).prefetch(-1),
            }
            for name, ds in pipelines.items():
                wall, cpu, times = epoch_seconds(ds, args.epochs)
                runs = " ".join(f"{t:.2f}" for t in times)
                ms = cpu / args.images * 1e3
                print(f"{image_size:>10}  {name:<56}{args.images / wall:>10.0f}{ms:>14.2f}  {runs}")


if __name__ == "__main__":
    main()
