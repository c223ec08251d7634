"""`data.from_directory` reads every format and colour mode it lists, or refuses it up front (issue 12).

The matrix: format x colour mode x `channels`. PIL writes each file and is the independent
reference: the pipeline's pixels must equal PIL's own conversion of the same file
(`Image.open(f).convert("RGB" | "L")`). Images are 5 x 7 pixels, read at 5 x 7 (no resize), so
that BMP rows need padding to 4 bytes.
"""

import struct

import numpy as np
import pytest
from PIL import Image

from keras_vit import data

HEIGHT, WIDTH = 5, 7
# Every mode PIL can write in each format (the test below checks PIL refuses the rest).
# "P+t" is a palette image with a transparent index; "I;16" is 16-bit grey.
MODES = {
    "png": ("1", "L", "LA", "RGB", "RGBA", "P", "P+t", "I;16"),
    "jpg": ("1", "L", "RGB", "CMYK"),
    "bmp": ("1", "L", "RGB", "RGBA", "P", "P+t"),
    "gif": ("1", "L", "LA", "RGB", "RGBA", "P", "P+t", "I;16"),
}
ALL_MODES = ("1", "L", "LA", "RGB", "RGBA", "P", "P+t", "I;16", "CMYK")
PIL_FORMAT = {"png": "PNG", "jpg": "JPEG", "bmp": "BMP", "gif": "GIF"}
GREY_MODES = ("1", "L", "LA", "I;16")


def _pil_image(mode, rng):
    """A random HEIGHT x WIDTH image in `mode`; palette images use index 3 (transparent in "P+t")."""
    if mode in ("P", "P+t"):
        image = Image.fromarray(rng.integers(0, 16, (HEIGHT, WIDTH), dtype=np.uint8), "P")
        image.putpalette(rng.integers(0, 256, 16 * 3, dtype=np.uint8).tobytes())
        return image
    if mode == "I;16":
        return Image.fromarray(rng.integers(0, 65536, (HEIGHT, WIDTH)).astype(np.uint16))
    if mode == "1":
        return Image.fromarray(rng.integers(0, 2, (HEIGHT, WIDTH)).astype(bool))
    bands = len(Image.new(mode, (1, 1)).getbands())
    return Image.fromarray(rng.integers(0, 256, (HEIGHT, WIDTH, bands), dtype=np.uint8).squeeze(), mode)


def _save(path, mode, rng):
    image = _pil_image(mode, rng)
    options = {"transparency": 3} if mode == "P+t" else {}
    image.save(path, PIL_FORMAT[path.suffix[1:]], **options)


def _reference(path, channels):
    """PIL's reading of the file, in [0, 255], shape (HEIGHT, WIDTH, channels)."""
    image = Image.open(path)
    if image.mode == "I;16":  # PIL's convert("L") clips 16-bit values at 255; 65535 is white, so v / 257
        grey = np.asarray(image, np.float64)[..., None] / 257.0
        return np.repeat(grey, channels, axis=-1)
    return np.asarray(image.convert("L" if channels == 1 else "RGB"), np.float64).reshape(HEIGHT, WIDTH, channels)


def _read_folder(root, channels, **kwargs):
    ds = data.from_directory(root, image_size=(HEIGHT, WIDTH), channels=channels, batch_size=4, **kwargs)
    images, labels = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
    return ds, (np.concatenate(images) + 1.0) * 127.5, np.concatenate(labels)


def _check_pixels(root, files, channels, tolerance):
    """`tolerance`: levels in [0, 255], one for every file or a list of one a file."""
    ds, pixels, labels = _read_folder(root, channels)
    assert pixels.shape == (len(files), HEIGHT, WIDTH, channels)
    assert ds.file_paths == [str(f) for f in files]
    np.testing.assert_array_equal(labels, np.arange(len(files)))
    tolerances = tolerance if isinstance(tolerance, list) else [tolerance] * len(files)
    for got, path, atol in zip(pixels, files, tolerances):
        np.testing.assert_allclose(got, _reference(path, channels), atol=atol + 1e-3, err_msg=str(path))


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("extension", sorted(MODES))
def test_every_format_and_mode_gives_pils_pixels(tmp_path, extension, channels):
    """Each mode the format stores, one class folder per mode (one file each) read by one pipeline: a reading per
    format and channel count, not per mode (a pipeline costs about 2.5 s on an AVX2-only CPU; the matrix's 52
    readings were 5 of the suite's minutes there)."""
    files, tolerances = [], []
    for i, mode in enumerate(MODES[extension]):
        rng = np.random.default_rng(sum(map(ord, extension + mode)))
        path = tmp_path / f"{i:02d}-{mode.replace(';', '_')}" / f"0.{extension}"
        path.parent.mkdir()
        _save(path, mode, rng)
        files.append(path)
        # PIL rounds its luma to whole levels; libjpeg's and PIL's CMYK -> RGB round differently (one level).
        tolerances.append((0.5 if channels == 1 and mode not in GREY_MODES else 0.0) + (1.0 if mode == "CMYK" else 0.0))
    _check_pixels(tmp_path, files, channels, tolerances)


@pytest.mark.parametrize("extension", sorted(MODES))
def test_the_matrix_holds_every_mode_the_format_can_store(tmp_path, extension):
    rng = np.random.default_rng(0)
    for mode in sorted(set(ALL_MODES) - set(MODES[extension])):
        refusal = f"cannot write mode {mode.split('+')[0]} as {PIL_FORMAT[extension]}|image has wrong mode"
        with pytest.raises((OSError, ValueError), match=refusal):
            _save(tmp_path / f"x.{extension}", mode, rng)


def test_grey_bmp_folder_of_the_issue(tmp_path):
    """Issue 12: 8x8 grey BMPs with channels=1 died with "channels must be 0, 3 or 4 for BMP"."""
    rng = np.random.default_rng(0)
    grey = rng.integers(0, 256, (2, 2, 8, 8), dtype=np.uint8)
    for c, name in enumerate(("cat", "dog")):
        (tmp_path / name).mkdir()
        for i in range(2):
            Image.fromarray(grey[c, i], "L").save(tmp_path / name / f"{i}.bmp")
    ds = data.from_directory(tmp_path, image_size=8, channels=1, batch_size=4)
    (x, y), *rest = list(ds)
    assert not rest and x.shape == (4, 8, 8, 1) and y.numpy().tolist() == [0, 0, 1, 1]
    np.testing.assert_allclose((x.numpy() + 1) * 127.5, grey.reshape(4, 8, 8, 1), atol=1e-3)


def _bmp(path, pixels, bpp, *, palette=None, top_down=False, compression=0, header_size=40, masks=None):
    """Writes a BMP by hand: forms PIL does not write (4-bit, top-down, bit fields, RLE, 16-bit, OS/2)."""
    height, width = pixels.shape[:2]
    stride = (width * bpp + 31) // 32 * 4
    rows = []
    for row in pixels if top_down else pixels[::-1]:
        if bpp == 32:
            raw = row[:, [2, 1, 0, 3]].tobytes()  # BGRA
        elif bpp > 8:
            raw = row[:, ::-1].tobytes()  # BGR, or the two bytes of a 16-bit pixel
        else:  # indices, packed most significant bits first
            bits = "".join(format(int(v), f"0{bpp}b") for v in row)
            bits += "0" * (-len(bits) % 8)
            raw = int(bits, 2).to_bytes(len(bits) // 8, "big")
        rows.append(raw.ljust(stride, b"\0"))
    table = b"".join(bytes([b, g, r, 0]) for r, g, b in (palette if palette is not None else []))
    info = struct.pack("<iiHHIIiiII", width, -height if top_down else height, 1, bpp, compression, 0, 0, 0,
                       len(table) // 4, 0)
    info = struct.pack("<I", header_size) + info
    if masks is not None:
        info += struct.pack("<IIII", *masks)
    info = info.ljust(header_size if masks is None else max(header_size, len(info)), b"\0")
    offset = 14 + len(info) + len(table)
    body = b"".join(rows)
    path.write_bytes(b"BM" + struct.pack("<IHHI", offset + len(body), 0, 0, offset) + info + table + body)


HAND_WRITTEN = {
    "1-bit, top-down": dict(bpp=1, colours=2, top_down=True),
    "4-bit": dict(bpp=4, colours=16),
    "4-bit, 5 colours used": dict(bpp=4, colours=5),
    "8-bit, top-down": dict(bpp=8, colours=256, top_down=True),
    "24-bit, top-down": dict(bpp=24, top_down=True),
    "32-bit bit fields, V5 header": dict(
        bpp=32, compression=3, header_size=124, masks=(0x00FF0000, 0x0000FF00, 0x000000FF, 0xFF000000)
    ),
}


@pytest.mark.parametrize("kind", sorted(HAND_WRITTEN))
def test_bmp_forms_pil_does_not_write(tmp_path, kind):
    options = dict(HAND_WRITTEN[kind])
    bpp, colours = options["bpp"], options.pop("colours", None)
    rng = np.random.default_rng(bpp)
    files = [tmp_path / name / "0.bmp" for name in ("a", "b")]
    for path in files:
        path.parent.mkdir()
        if colours:
            palette = rng.integers(0, 256, (colours, 3), dtype=np.uint8)
            _bmp(path, rng.integers(0, colours, (HEIGHT, WIDTH)), palette=palette, **options)
        else:
            _bmp(path, rng.integers(0, 256, (HEIGHT, WIDTH, bpp // 8), dtype=np.uint8), **options)
        assert Image.open(path).size == (WIDTH, HEIGHT)  # PIL reads what was written
    for channels in (1, 3):
        _check_pixels(tmp_path, files, channels, 0.5 if channels == 1 else 0.0)


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(bpp=8, compression=1), r"BMP with 8 bits per pixel and RLE8 compression"),
        (dict(bpp=4, compression=2), r"BMP with 4 bits per pixel and RLE4 compression"),
        (dict(bpp=16), r"BMP with 16 bits per pixel"),
        (dict(bpp=24, header_size=12), r"BMP with a 12-byte \(OS/2\) header"),
        (dict(bpp=32, compression=3, masks=(0xFF, 0xFF00, 0xFF0000, 0)), r"BMP with 32 bits per pixel and bit fields"),
    ],
)
def test_bmp_forms_tensorflow_cannot_read_are_refused_up_front(tmp_path, options, message):
    (tmp_path / "a").mkdir()
    Image.new("RGB", (WIDTH, HEIGHT)).save(tmp_path / "a" / "good.png")
    pixels = np.zeros((HEIGHT, WIDTH, options["bpp"] // 8) if options["bpp"] > 8 else (HEIGHT, WIDTH), np.uint8)
    bad = tmp_path / "a" / "bad.bmp"
    if options.get("header_size") == 12:  # OS/2 BITMAPCOREHEADER: 16-bit width and height
        bad.write_bytes(b"BM" + struct.pack("<IHHIIHHHH", 26, 0, 0, 26, 12, WIDTH, HEIGHT, 1, 24))
    else:
        palette = np.zeros((1 << options["bpp"], 3), np.uint8) if options["bpp"] <= 8 else None
        _bmp(bad, pixels, palette=palette, **options)
    with pytest.raises(ValueError, match=f"{message}.* Received: a file {str(bad)!r}"):
        data.from_directory(tmp_path, image_size=8)


def test_animated_gif_gives_its_first_frame_with_transparent_pixels_in_palette_colour(tmp_path):
    rng = np.random.default_rng(7)
    frames = [_pil_image("P", rng) for _ in range(2)]
    files = [tmp_path / name / "0.gif" for name in ("a", "b")]
    for path in files:
        path.parent.mkdir()
        frames[0].save(path, save_all=True, append_images=frames[1:], transparency=3, duration=100, loop=0)
        assert Image.open(path).n_frames == 2
    _check_pixels(tmp_path, files, 3, 0.0)


def test_image_folder_benchmark_runs(capsys):
    from benchmarks import image_folder

    image_folder.main(["--images", "4", "--size", "32", "--image-size", "8", "--epochs", "1", "--batch-size", "2"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    names = ["keras_vit.data.from_directory", "keras_vit.data.from_directory(exif_orientation=False)",
             "keras.utils.image_dataset_from_directory"]
    assert [row[:2] for row in rows] == [["8", name] for name in names]
    assert all(float(row[2]) > 0 and float(row[3]) > 0 for row in rows)  # images/s, CPU ms per image


@pytest.mark.parametrize("channels", [1, 3])
@pytest.mark.parametrize("lossless", [True, False])
def test_webp_gives_pils_pixels(tmp_path, lossless, channels):
    """Issue 29, item 3: WebP is read (TensorFlow 2.21 decodes it; Keras' list of formats leaves it out). One class
    folder per mode, read by one pipeline."""
    files = []
    for i, mode in enumerate(("L", "RGB", "RGBA")):
        rng = np.random.default_rng(sum(map(ord, mode)) + lossless)
        path = tmp_path / f"{i}-{mode}" / "0.webp"
        path.parent.mkdir()
        _pil_image(mode, rng).save(path, "WEBP", lossless=lossless, quality=80)
        files.append(path)
    _check_pixels(tmp_path, files, channels, 0.5 if channels == 1 else 0.0)  # PIL rounds its luma


def test_a_folder_of_png_and_a_folder_of_webp_are_both_read(tmp_path):
    """The issue's folder: photos/a/*.png and photos/b/*.webp gave class b no image, and nothing was said."""
    rng = np.random.default_rng(0)
    for name, extension, fmt in (("a", "png", "PNG"), ("b", "webp", "WEBP")):
        (tmp_path / name).mkdir()
        for i in range(3):
            _pil_image("RGB", rng).save(tmp_path / name / f"{i}.{extension}", fmt, lossless=True)
    ds, pixels, labels = _read_folder(tmp_path, 3)
    assert ds.class_names == ["a", "b"] and ds.num_examples == 6
    np.testing.assert_array_equal(labels, [0, 0, 0, 1, 1, 1])
    for got, path in zip(pixels, ds.file_paths):
        np.testing.assert_allclose(got, _reference(path, 3), atol=1e-3, err_msg=path)


def test_a_class_folder_with_no_readable_image_is_refused_by_name(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "a").mkdir()
    _pil_image("RGB", rng).save(tmp_path / "a" / "0.png")
    (tmp_path / "b").mkdir()
    _pil_image("RGB", rng).save(tmp_path / "b" / "0.tiff")
    (tmp_path / "c").mkdir()
    with pytest.raises(ValueError, match=r"class folders 'b' \(it holds 1 \.tiff\), 'c' \(it holds nothing\) hold no "
                                         r"image keras_vit reads \(\.bmp, .*\.webp\); convert the images"):
        data.from_directory(tmp_path, image_size=8)


def test_image_files_in_formats_it_does_not_read_are_named(tmp_path, caplog):
    rng = np.random.default_rng(0)
    for name in ("a", "b"):  # two images a class: the split below holds out one of each (stratified)
        (tmp_path / name).mkdir()
        _pil_image("RGB", rng).save(tmp_path / name / "0.png")
        _pil_image("RGB", rng).save(tmp_path / name / "9.png")
    _pil_image("RGB", rng).save(tmp_path / "b" / "1.tiff")
    (tmp_path / "b" / "2.heic").write_bytes(b"not decoded")
    (tmp_path / "b" / "notes.txt").write_text("not an image: not named")
    with caplog.at_level("WARNING", logger="keras_vit.data"):
        ds = data.from_directory(tmp_path, image_size=8)
    assert ds.num_examples == 4
    (record,) = [r for r in caplog.records if r.name == "keras_vit.data"]
    assert "2 image files in a format keras_vit does not read" in record.getMessage()
    assert "b/1.tiff" in record.getMessage() and "b/2.heic" in record.getMessage()
    assert "notes.txt" not in record.getMessage()
    caplog.clear()
    with caplog.at_level("WARNING", logger="keras_vit.data"):  # the other subset of the same folder: said once
        data.from_directory(tmp_path, image_size=8, validation_split=0.5, subset="validation", seed=0)
    assert not [r for r in caplog.records if r.name == "keras_vit.data"]
