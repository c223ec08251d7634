"""Issue 43, item 1: EXIF orientation applied inside keras_vit.data's pipeline, against PIL's `exif_transpose`.

Each of the 8 Orientation values, in JPEG (the APP1 Exif segment after PIL's JFIF APP0), PNG (the eXIf chunk)
and WebP (the EXIF chunk of a VP8X file), little-endian ("II", as PIL writes) and big-endian ("MM", as many cameras
write); the decoded pixels must be PIL's `ImageOps.exif_transpose(Image.open(file))` (the independent reference),
and `from_directory` must give a folder of EXIF-rotated files the pixels of the same pictures saved upright.
"""

import io
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image, ImageOps

from keras_vit import data
from keras_vit.data import exif, image_files

ORIENTATIONS = range(1, 9)


def _picture(height=12, width=20, seed=0):
    """An RGB picture with no symmetry: every flip and turn gives other pixels."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


def _exif_bytes(value, big_endian=False):
    """A TIFF structure with one IFD0 entry, Orientation = `value` (TIFF 6.0, section 2)."""
    if not big_endian:
        tags = Image.Exif()
        tags[0x0112] = value
        return tags.tobytes()
    entry = (0x0112).to_bytes(2, "big") + (3).to_bytes(2, "big") + (1).to_bytes(4, "big") + value.to_bytes(2, "big")
    return b"Exif\0\0" + b"MM\0\x2a" + (8).to_bytes(4, "big") + (1).to_bytes(2, "big") + entry + b"\0\0" + b"\0" * 4


def _save(path, pixels, fmt, value, big_endian=False):
    image = Image.fromarray(pixels)
    options = {"JPEG": {"quality": 95}, "PNG": {}, "WEBP": {"lossless": True}}[fmt]
    image.save(path, fmt, exif=_exif_bytes(value, big_endian), **options)
    return path


def _decoded(path, orientation=True):
    return image_files.decode_image_file(tf.constant(str(path)), None, orientation).numpy()


def _pil_upright(path):
    with Image.open(path) as image:
        return np.asarray(ImageOps.exif_transpose(image).convert("RGB"), dtype=np.float32)


@pytest.mark.parametrize("big_endian", [False, True], ids=["II", "MM"])
@pytest.mark.parametrize("fmt", ["JPEG", "PNG", "WEBP"])
@pytest.mark.parametrize("value", ORIENTATIONS)
def test_each_orientation_reads_as_pil_shows_it(value, fmt, big_endian, tmp_path):
    path = _save(tmp_path / f"photo.{fmt.lower()}", _picture(), fmt, value, big_endian)
    with Image.open(path) as image:
        assert image.getexif().get(0x0112) == value  # PIL reads the tag we wrote
    contents = tf.io.read_file(str(path))
    assert int(exif.orientation(contents)) == value
    upright = _decoded(path)
    expected = _pil_upright(path)
    assert upright.shape == expected.shape == ((20, 12, 3) if value >= 5 else (12, 20, 3))
    np.testing.assert_array_equal(upright, expected)
    stored = _decoded(path, orientation=False)
    assert stored.shape == (12, 20, 3)
    if value != 1:  # the stored pixels are another picture
        assert upright.shape != stored.shape or not np.array_equal(upright, stored)


@pytest.mark.parametrize("head", [b"", b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"RIFF\0\0\0\0WEBPVP8X", b"GIF89a"])
def test_files_without_a_tag_or_cut_short_read_as_stored(head, tmp_path):
    assert int(exif.orientation(tf.constant(head + b"\0" * 5))) == 1
    path = _save(tmp_path / "plain.png", _picture(), "PNG", 1)
    Image.fromarray(_picture()).save(tmp_path / "none.jpg", quality=95)
    assert int(exif.orientation(tf.io.read_file(str(tmp_path / "none.jpg")))) == 1
    np.testing.assert_array_equal(_decoded(path), _decoded(path, orientation=False))


def _png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


@pytest.mark.parametrize("value", [6, 3])
def test_exif_after_more_than_64_kib_of_other_metadata_is_read(value, tmp_path):
    """From a fresh-user review: a JPEG whose ICC profile (three 60 KiB APP2 segments) comes before its Exif
    segment, and a PNG with a 100 KiB text chunk before its eXIf chunk, read as stored: only the first 64 KiB
    were searched. Both must read as PIL shows them."""
    _save(tmp_path / "plain.jpg", _picture(), "JPEG", value)
    stored = (tmp_path / "plain.jpg").read_bytes()
    icc = b"".join(b"\xff\xe2" + struct.pack(">H", 2 + 60 * 1024) + bytes(60 * 1024) for _ in range(3))
    (tmp_path / "icc_first.jpg").write_bytes(stored[:2] + icc + stored[2:])  # after the start of image
    # a second review: an ICC profile or Photoshop's APP13 (a thumbnail) whose bytes hold a start of scan (FF DA)
    for name, header, marker in (("icc_bytes", b"ICC_PROFILE\0", b"\xff\xe2"), ("app13", b"Photoshop 3.0\0", b"\xff\xed")):
        body = header + (b"\x01\xff\xda\x00" * 15360)[: 60 * 1024 - len(header)]
        segments = b"".join(marker + struct.pack(">H", 2 + len(body)) + body for _ in range(2))
        (tmp_path / f"{name}.jpg").write_bytes(stored[:2] + segments + stored[2:])
    _save(tmp_path / "plain.png", _picture(), "PNG", value)
    stored = (tmp_path / "plain.png").read_bytes()
    text = _png_chunk(b"tEXt", b"Comment\0" + bytes(range(32, 127)) * 1100)
    (tmp_path / "text_first.png").write_bytes(stored[:33] + text + stored[33:])  # after the 8-byte signature and IHDR
    for name in ("icc_first.jpg", "icc_bytes.jpg", "app13.jpg", "text_first.png"):
        path = tmp_path / name
        assert path.stat().st_size > 100 * 1024
        with Image.open(path) as image:
            assert image.getexif().get(0x0112) == value
        assert int(exif.orientation(tf.io.read_file(str(path)))) == value, name
        np.testing.assert_array_equal(_decoded(path), _pil_upright(path))


def test_a_big_endian_orientation_stored_as_long_is_read(tmp_path):
    """From a fresh-user review: some writers store the Orientation as a LONG (type 4), not a SHORT; in a
    big-endian ("MM") file its value then sits in the last 2 of the entry's 4 value bytes."""
    entry = struct.pack(">HHII", 0x0112, 4, 1, 6)
    tiff = b"Exif\0\0" + b"MM\0\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1) + entry + b"\0" * 4
    Image.fromarray(_picture()).save(tmp_path / "long.jpg", quality=95, exif=tiff)
    with Image.open(tmp_path / "long.jpg") as image:
        assert image.getexif().get(0x0112) == 6
    assert int(exif.orientation(tf.io.read_file(str(tmp_path / "long.jpg")))) == 6
    np.testing.assert_array_equal(_decoded(tmp_path / "long.jpg"), _pil_upright(tmp_path / "long.jpg"))


@pytest.mark.parametrize("value", [0, 9, 65535])
def test_an_orientation_out_of_range_reads_as_stored(value, tmp_path):
    path = _save(tmp_path / "odd.png", _picture(), "PNG", value)
    assert int(exif.orientation(tf.io.read_file(str(path)))) == 1
    np.testing.assert_array_equal(_decoded(path), np.asarray(_picture(), np.float32))


def test_from_directory_sees_rotated_photos_as_the_upright_pictures(tmp_path):
    """A phone's portrait photos (stored sideways, tag 6 or 8) give the pixels of the same pictures saved upright."""
    rotated, upright = tmp_path / "rotated", tmp_path / "upright"
    for k, value in enumerate([1, 3, 6, 8, 2, 5]):
        pixels = _picture(16, 16, seed=k)
        for folder in (rotated, upright):
            (folder / f"class_{k % 2}").mkdir(parents=True, exist_ok=True)
        path = _save(rotated / f"class_{k % 2}" / f"{k}.png", pixels, "PNG", value)
        Image.fromarray(_pil_upright(path).astype(np.uint8)).save(upright / f"class_{k % 2}" / f"{k}.png")
    kw = dict(image_size=16, batch_size=8)
    (turned, labels), = data.from_directory(str(rotated), **kw)
    (reference, reference_labels), = data.from_directory(str(upright), **kw)
    np.testing.assert_array_equal(labels, reference_labels)
    np.testing.assert_allclose(turned, reference, atol=1e-6)
    (stored, _), = data.from_directory(str(rotated), exif_orientation=False, **kw)
    assert np.abs(stored.numpy() - reference.numpy()).max() > 0.5  # off: the sideways pixels


def test_reading_rotated_photos_logs_no_error_line(tmp_path):
    """TensorFlow's oneDNN Transpose logs "E... oneDNN supports DT_UINT8 only on platforms with AVX-512" for any
    integer tensor on this project's AMD EPYC (which has AVX-512): the orientation turns float32 pixels, so a user's
    notebook or `keras-vit-train --verbose 0` shows no ERROR line for a folder of photos. A fresh process: the line
    is logged once per process."""
    for k, value in enumerate([1, 6, 8, 3]):
        (tmp_path / f"c{k % 2}").mkdir(exist_ok=True)
        _save(tmp_path / f"c{k % 2}" / f"{k}.jpg", _picture(seed=k), "JPEG", value)
    code = ("import sys; from keras_vit import data\n"
            "(x, y), = data.from_directory(sys.argv[1], image_size=16, batch_size=4)\n"
            "print(x.shape, data.read_image(sys.argv[2]).shape)")
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path), str(tmp_path / "c1" / "1.jpg")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split() == ["(4,", "16,", "16,", "3)", "(20,", "12,", "3)"]  # tag 6: 12 x 20 stored, turned
    assert [line for line in run.stderr.splitlines() if line.startswith("E0000") and "cuInit" not in line] == []


def test_exif_orientation_takes_only_a_bool(tmp_path):
    with pytest.raises(ValueError, match=r"`exif_orientation` must be True or False. Received: exif_orientation='no'"):
        data.from_directory(str(tmp_path), image_size=16, exif_orientation="no")


def test_the_folder_benchmark_times_orientation_on_and_off(tmp_path, capsys):
    """benchmarks.image_folder's table (the measurement of issue 43 is in
    benchmarks/findings/exif-orientation-cost.md): its folder's JPEGs carry Orientation 6, and each pipeline reads every
    file of it."""
    from benchmarks import image_folder

    image_folder.write_folder(str(tmp_path / "photos"), 4, 32)
    jpeg = next((tmp_path / "photos").rglob("*.jpg"))
    assert int(exif.orientation(tf.io.read_file(str(jpeg)))) == 6
    image_folder.main(["--images", "4", "--size", "32", "--image-size", "16", "--epochs", "1", "--batch-size", "2"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("16 ")]
    assert [row[1] for row in rows] == ["keras_vit.data.from_directory",
                                       "keras_vit.data.from_directory(exif_orientation=False)",
                                       "keras.utils.image_dataset_from_directory"]
    assert all(float(row[2]) > 0 for row in rows)
