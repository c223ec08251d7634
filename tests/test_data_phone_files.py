"""Issue 43, items 5 and 6: phone files and folder faults that `keras_vit.data` must read right or refuse by name.

- Decompression bombs: every format's width and height are read from its header before decoding, against
  `max_pixels` (PIL's default limit); a 20000 x 20000 PNG of a few hundred kB is refused, named, up front.
- An animated WebP (TensorFlow's decoder aborts the process on one) is refused by name.
- A held-out folder that lacks a class keeps the other classes' labels with `class_names=`.
- Images smaller than one patch are read and scaled up to `image_size` (one pixel: one colour).
"""

import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from keras_vit import data
from keras_vit.data import MAX_PIXELS

WIDTH, HEIGHT = 37, 21  # 777 pixels


def _png_bomb(path, width=20000, height=20000):
    """A grey PNG of `width` x `height` black pixels, written row by row (a few hundred kB on disk, never the
    400 MB image in memory): the PNG specification's IHDR, IDAT and IEND chunks."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    packer, row, parts = zlib.compressobj(9), b"\0" * (width + 1), []  # filter byte 0, then the row
    for _ in range(height):
        parts.append(packer.compress(row))
    parts.append(packer.flush())
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)))
        f.write(chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b""))


def _folder(root, classes=("a", "b"), count=2, size=8):
    for name in classes:
        (root / name).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(np.full((size, size, 3), 40 * i + 10, np.uint8)).save(root / name / f"{i}.png")
    return root


def test_the_default_limit_is_pils():
    assert MAX_PIXELS == Image.MAX_IMAGE_PIXELS == 89_478_485


def test_a_png_bomb_in_a_training_folder_is_refused_by_name_before_decoding(tmp_path):
    root = _folder(tmp_path / "photos")
    _png_bomb(root / "a" / "bomb.png")
    assert (root / "a" / "bomb.png").stat().st_size < 2_000_000
    with pytest.raises(Image.DecompressionBombError, match=r"\(400000000 pixels\)"):  # PIL refuses it too
        Image.open(root / "a" / "bomb.png")
    with pytest.raises(ValueError, match=r"bomb\.png.*it is 20000 x 20000 pixels, more than the limit of 89,478,485 "
                                         r"\(max_pixels="):
        data.from_directory(root, image_size=8)


@pytest.mark.parametrize("fmt,options", [
    ("JPEG", {}), ("PNG", {}), ("GIF", {}), ("BMP", {}), ("WEBP", {"lossless": False}), ("WEBP", {"lossless": True}),
    ("WEBP", {"exif": b"Exif\0\0II*\0\x08\0\0\0\0\0\0\0\0\0"}),  # an EXIF chunk: the extended (VP8X) header
], ids=["jpeg", "png", "gif", "bmp", "webp_lossy", "webp_lossless", "webp_vp8x"])
def test_each_formats_header_size_is_read_exactly(tmp_path, fmt, options):
    path = tmp_path / f"x.{fmt.lower()}"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (HEIGHT, WIDTH, 3), np.uint8)).save(path, fmt, **options)
    if "exif" in options:
        assert path.read_bytes()[12:16] == b"VP8X"
    assert data.read_image(path, max_pixels=WIDTH * HEIGHT).shape[:2] == (HEIGHT, WIDTH)
    with pytest.raises(ValueError, match=rf"x\.{fmt.lower()}' cannot be read: it is {WIDTH} x {HEIGHT} pixels, more "
                                         rf"than the limit of 776"):
        data.read_image(path, max_pixels=WIDTH * HEIGHT - 1)
    assert data.read_image(path, max_pixels=None).shape[:2] == (HEIGHT, WIDTH)


@pytest.mark.parametrize("bad", [0, -5, 1.5, "many", True])
def test_a_bad_max_pixels_is_named(tmp_path, bad):
    root = _folder(tmp_path)
    with pytest.raises(ValueError, match=r"`max_pixels` must be None \(no limit\) or an int >= 1"):
        data.from_directory(root, image_size=8, max_pixels=bad)


def test_an_animated_webp_is_refused_by_name_and_a_still_one_reads(tmp_path):
    root = _folder(tmp_path)
    frames = [Image.new("RGB", (16, 16), (40 * i, 0, 0)) for i in range(3)]
    frames[0].save(root / "a" / "still.webp", lossless=True)
    assert data.from_directory(root, image_size=8).num_examples == 5
    frames[0].save(root / "b" / "moving.webp", save_all=True, append_images=frames[1:], duration=100)
    with Image.open(root / "b" / "moving.webp") as image:
        assert image.is_animated
    with pytest.raises(ValueError, match=r"`directory` holds an animated WebP.*save its first frame.*moving\.webp"):
        data.from_directory(root, image_size=8)
    with pytest.raises(ValueError, match=r"^`path` is an animated WebP, which keras_vit.data cannot decode"):
        data.read_image(root / "b" / "moving.webp")


def test_a_held_out_folder_without_a_class_keeps_the_labels_of_the_others(tmp_path):
    """Issue 43, item 6: without `class_names` the folder's classes are numbered from 0, so 'c' took 'b''s label."""
    train = data.from_directory(_folder(tmp_path / "train", ("a", "b", "c")), image_size=8)
    held_out = _folder(tmp_path / "held_out", ("a", "c"))
    labels = lambda ds: sorted(set(np.concatenate([y.numpy() for _, y in ds]).tolist()))  # noqa: E731
    assert labels(data.from_directory(held_out, image_size=8)) == [0, 1]  # what a plain read gives: 'c' as 1
    named = data.from_directory(held_out, image_size=8, class_names=train.class_names)
    assert named.class_names == ["a", "b", "c"] and labels(named) == [0, 2]
    with pytest.raises(ValueError, match=r"class folder 'c' is not in `class_names` \(2 names: 'a', 'b'\)"):
        data.from_directory(held_out, image_size=8, class_names=["a", "b"])
    with pytest.raises(ValueError, match=r"`class_names` must be None or a list of distinct str"):
        data.from_directory(held_out, image_size=8, class_names=["a", "a", "c"])


@pytest.mark.parametrize("size", [(1, 1), (1, 5), (3, 2)])
def test_an_image_smaller_than_a_patch_is_scaled_up_to_image_size(tmp_path, size):
    """A 1 x 1 image reads as one colour over the whole `image_size`; thin and tiny ones as PIL scales them up
    (bilinear, within a level: antialiasing does nothing when scaling up)."""
    root = tmp_path / "tiny"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    rng = np.random.default_rng(size[0] * 7 + size[1])
    picture = rng.integers(0, 256, (*size, 3), np.uint8)
    Image.fromarray(picture).save(root / "a" / "0.png")
    Image.fromarray(picture).save(root / "b" / "0.png")
    (images, _), = data.from_directory(root, image_size=16, batch_size=2)
    pixels = (images.numpy()[0] + 1.0) * 127.5
    expected = np.asarray(Image.fromarray(picture).resize((16, 16), Image.BILINEAR), np.float32)
    np.testing.assert_allclose(pixels, expected, atol=1.0)
    if size == (1, 1):
        np.testing.assert_allclose(pixels, np.broadcast_to(picture.astype(np.float32), pixels.shape), atol=1e-3)
