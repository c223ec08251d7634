"""Checking and decoding the image files that `keras_vit.data.from_directory` reads.

`check_image_file` reads the first bytes of a .bmp, .gif or .webp file in
Python before the pipeline is built: it refuses a BMP that `_decode_image`
cannot decode (e.g. RLE or other compression, 16 bits per pixel, an OS/2
header, non-standard bit fields) and an animated WebP (TensorFlow's decoder
aborts the process on one) with a `ValueError` naming the file, and finds
the transparency flag of a GIF's first frame. Inside the pipeline, every
file's width and height are read from its header before it is decoded, and
one of more than `max_pixels` pixels (PIL's default limit) fails, so that a
decompression bomb is refused before memory grows. `decode_image_file` then reads and
decodes one file inside the tf.data pipeline: JPEG with the accurate integer
IDCT, PNG up to 16 bits (v / 257 for 16-bit), BMP including 1-, 4- and
8-bit palette images (decoded here: TensorFlow reads 8-bit indices as grey
and no fewer bits), and a GIF's first frame with transparent pixels in their
palette colour (as PIL reads them). Every decoded image is
float32 `(height, width, c)` in [0, 255] with c as stored (1 to 4); channel
conversion and resizing are `keras_vit.data`'s.

`read_image` is the same decoding of one file, eagerly, as NumPy.

`check_decodable` decodes every file once, before training, with the
pipeline's own decoder, so that a corrupt or unreadable file is named by its
path up front instead of failing the first training step.

The formats: BMP as in Microsoft's BITMAPINFOHEADER documentation, GIF as in
the GIF89a specification (graphic control extension, section 23).
"""

import os
import re

from keras_vit.common.backend import tensorflow
from keras_vit.data import exif

tf = tensorflow("Reading image files (keras_vit.data)")

_BMP_STANDARD_MASKS = (0x00FF0000, 0x0000FF00, 0x000000FF)  # R, G, B of a 32-bit BGRA pixel
_BMP_COMPRESSIONS = {
    1: "RLE8 compression", 2: "RLE4 compression", 3: "bit fields", 4: "JPEG compression", 5: "PNG compression",
    6: "alpha bit fields",
}


def check_image_file(path, holder="`directory` holds"):
    """Reads the start of a .bmp, .gif or .webp file; refuses a BMP `_decode_image` cannot decode, and an
    animated WebP.

    Returns the byte offset of the transparency flag (bit 0) in the graphic
    control extension of a GIF's first frame, or -1 (no such flag, or not a
    GIF). Raises ValueError naming the file for a BMP that `_decode_image`
    cannot read, or an animated WebP (TensorFlow's decoder aborts the process
    on one); the message begins with `holder` ("`path` is" for one file).
    """
    if not path.lower().endswith((".bmp", ".gif", ".webp")):
        return -1
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head[:4] == b"RIFF" and head[8:16] == b"WEBPVP8X" and len(head) > 20 and head[20] & 0x02:
        # The animation flag of the VP8X chunk (WebP container specification): TensorFlow's WebP decoder
        # corrupts the heap on such a file and aborts the process, so it is refused before any decoding.
        raise ValueError(
            f"{holder} an animated WebP, which keras_vit.data cannot decode; save its first frame as a "
            f"still image (e.g. PNG or a still WebP). Received: a file {path!r}"
        )
    if head[:2] == b"BM":
        problem = _bmp_problem(head)
        if problem:
            raise ValueError(
                f"{holder} a {problem}, which keras_vit.data cannot decode; convert it, e.g. to PNG. "
                f"Received: a file {path!r}"
            )
    elif head[:4] == b"GIF8":
        flag = _gif_transparency_flag(head)
        if flag is None:  # extensions longer than 64 KiB before the first frame
            with open(path, "rb") as f:
                flag = _gif_transparency_flag(f.read())
        return -1 if flag is None else flag
    return -1


def _bmp_problem(head):
    """None if `_decode_image` reads this BMP header, else what it is ("BMP with ...")."""
    header_size = int.from_bytes(head[14:18], "little")
    if 12 <= header_size < 40:
        return f"BMP with a {header_size}-byte (OS/2) header"
    if len(head) < 54 or header_size < 40:
        return "BMP with a damaged or cut-short header"
    bpp, compression = int.from_bytes(head[28:30], "little"), int.from_bytes(head[30:34], "little")
    if compression == 0 and bpp in (1, 4, 8, 24, 32):
        return None
    masks = tuple(int.from_bytes(head[i : i + 4], "little") for i in (54, 58, 62))
    if compression == 3 and bpp == 32 and masks == _BMP_STANDARD_MASKS:
        return None
    if compression == 0:
        return f"BMP with {bpp} bits per pixel"
    kind = _BMP_COMPRESSIONS.get(compression, f"compression type {compression}")
    if compression == 3:
        kind += " R, G, B = " + ", ".join(f"{m:#010x}" for m in masks) + " (only 0x00ff0000, 0x0000ff00, 0x000000ff)"
    return f"BMP with {bpp} bits per pixel and {kind}"


def _gif_transparency_flag(head):
    """Offset of the transparency flag byte of the first frame's graphic control extension, if set.

    Walks the GIF blocks before the first image descriptor: -1 when no
    graphic control extension there sets the flag, None when `head` ends
    first.
    """
    pos, flag = 13, -1
    if len(head) < pos:
        return None
    if head[10] & 0x80:  # global colour table of 2^(n+1) RGB entries
        pos += 3 << ((head[10] & 7) + 1)
    while pos + 2 < len(head):
        if head[pos] != 0x21:  # an image descriptor (0x2C), the trailer or garbage: done
            return flag
        if head[pos + 1] == 0xF9 and head[pos + 2] == 4:  # graphic control extension
            flag = pos + 3 if head[pos + 3] & 1 else flag
        pos += 2
        while pos < len(head) and head[pos]:  # data sub-blocks, each prefixed by its length
            pos += head[pos] + 1
        pos += 1
    return None


def check_decodable(paths, gif_flags, decode):
    """Decodes every file once as the pipeline will; raises ValueError naming the first that fails, by path.

    Runs `decode(path, gif_flag)` (`decode_image_file`, or it without the GIF
    test) over all files in one parallel tf.data pass that drops the files
    whose decoding fails (`Dataset.ignore_errors`), then decodes the first
    failed file again, eagerly, for TensorFlow's reason. The decoder is the
    training pipeline's own, so nothing passes here that fails there, and
    nothing is refused that it reads. Measured on this project's 2-core CPU:
    2,000 PNG files of 32x32 RGB pixels in 0.66 s (about 0.3 ms a file; the
    machine shared), on top of the pipeline's own first pass.

    Args:
        paths: list of str, the image files.
        gif_flags: list of int, each file's GIF transparency-flag offset or -1
            (`check_image_file`), as the pipeline reads them.
        decode: the pipeline's decode function of (path, gif_flag).

    Raises:
        ValueError: a file that cannot be read or decoded (empty, cut short,
            not an image, unreadable): its path, its size and TensorFlow's
            reason, and how many more files fail, naming up to three.
    """
    if not paths:
        return
    import numpy as np

    indices = tf.data.Dataset.from_tensor_slices((np.arange(len(paths)), paths, np.array(gif_flags, "int32")))
    shapes = indices.map(lambda i, path, flag: (i, tf.shape(decode(path, flag))), num_parallel_calls=tf.data.AUTOTUNE,
                         deterministic=False).ignore_errors()
    good = np.zeros(len(paths), bool)
    for i, shape in shapes.as_numpy_iterator():
        good[i] = bool(np.all(shape[:2] > 0))
    bad = [paths[i] for i in np.flatnonzero(~good)]
    if not bad:
        return
    path = bad[0]
    try:  # eagerly, op by op (a traced `file_decoder`'s Python body): a failing function call logs a stray
        # "[[{{function_node ...}}]]" line on stderr that the console's filter does not catch
        getattr(decode, "python_function", decode)(tf.constant(path), tf.constant(gif_flags[paths.index(path)], tf.int32))
        reason = "it decodes to an image of no pixels"
    except tf.errors.OpError as e:
        reason = _op_reason(e)
    try:
        size = f"{os.path.getsize(path):,d} bytes"
    except OSError as e:
        size = f"unreadable: {e.strerror}"
    more = ""
    if len(bad) > 1:
        more = f" ({len(bad) - 1} more file{'s fail' if len(bad) > 2 else ' fails'} too: " + ", ".join(
            repr(p) for p in bad[1:4]) + (", ..." if len(bad) > 4 else "") + ")"
    raise ValueError(f"the image file {path!r} ({size}) cannot be read: {reason}; remove or replace it{more}")


def _op_reason(error):
    """TensorFlow's reason in an `OpError`, without its op and function names: "Invalid PNG data, size 1586"."""
    text = (error.message or str(error)).strip().splitlines()[0]
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", text)
    # _assert_pixels' message: "assertion failed: [...]" in a graph, "Expected ... Summarized data: b'...'" eagerly
    text = re.sub(r"^assertion failed: \[(.*?)\]", r"\1", text)
    text = re.sub(r"^Expected .* Summarized data: b[\"'](.*)[\"']$", r"\1", text)
    return re.sub(r"\s*\[Op:\w+\].*$", "", text).strip().rstrip(".") or type(error).__name__


_ALL_BYTES = bytes(range(256))

# PIL's default `Image.MAX_IMAGE_PIXELS` (1024**3 // 4 // 3: a quarter GiB of 24-bit pixels); decoded as float32
# RGB, as the pipeline holds it, such an image takes about 1 GiB.
MAX_PIXELS = 89_478_485


def _header_size(contents):
    """(width, height) int64 from the header of JPEG, PNG, GIF, BMP or WebP bytes, read without decoding; (0, 0)
    for other bytes. JPEG: the SOF marker (`tf.image.extract_jpeg_shape`); PNG: the IHDR chunk; GIF: the logical
    screen; BMP: BITMAPINFOHEADER (height signed); WebP: the VP8X canvas, or the VP8L / VP8 frame header (the
    WebP container specification)."""
    padded = tf.strings.join([tf.strings.substr(contents, 0, 30), b"\0" * 30])
    b = tf.cast(tf.io.decode_raw(tf.strings.substr(padded, 0, 30), tf.uint8), tf.int64)

    def little(i, n):
        return tf.reduce_sum(b[i : i + n] * tf.constant([1, 1 << 8, 1 << 16, 1 << 24][:n], tf.int64))

    def big(i, n):
        return tf.reduce_sum(b[i : i + n] * tf.constant([1 << 24, 1 << 16, 1 << 8, 1][4 - n :], tf.int64))

    def starts(offset, text):
        return tf.reduce_all(tf.equal(b[offset : offset + len(text)], list(text)))

    def jpeg():
        shape = tf.cast(tf.image.extract_jpeg_shape(contents), tf.int64)
        return tf.stack([shape[1], shape[0]])

    webp = starts(0, b"RIFF") & starts(8, b"WEBP")
    height_bmp = little(22, 4)
    lossless = little(21, 4)  # VP8L: 14 bits width - 1, 14 bits height - 1
    sizes = [
        (starts(0, b"\x89PNG"), lambda: tf.stack([big(16, 4), big(20, 4)])),
        (starts(0, b"GIF8"), lambda: tf.stack([little(6, 2), little(8, 2)])),
        (starts(0, b"BM"), lambda: tf.stack([little(18, 4), tf.abs(tf.where(height_bmp >= 1 << 31,
                                                                             height_bmp - (1 << 32), height_bmp))])),
        (webp & starts(12, b"VP8X"), lambda: tf.stack([little(24, 3) + 1, little(27, 3) + 1])),
        (webp & starts(12, b"VP8L"), lambda: tf.stack([lossless % (1 << 14) + 1, lossless // (1 << 14) % (1 << 14) + 1])),
        (webp & starts(12, b"VP8 "), lambda: tf.stack([little(26, 2) % (1 << 14), little(28, 2) % (1 << 14)])),
    ]
    size = tf.cond(starts(0, b"\xff\xd8\xff"), jpeg, lambda: tf.zeros([2], tf.int64))
    for test, read in sizes:
        size = tf.cond(test, read, lambda size=size: size)
    return size[0], size[1]


def _assert_pixels(contents, max_pixels):
    """An op that fails, saying the image's size and the limit, when its header gives more than `max_pixels`."""
    width, height = _header_size(contents)
    message = tf.strings.format(
        "it is {} x {} pixels, more than the limit of " + f"{max_pixels:,d} (max_pixels={max_pixels}, of "
        "keras_vit.data.from_directory and read_image; None: no limit): a file this size may be a decompression bomb",
        (width, height))
    return tf.debugging.Assert(width * height <= max_pixels, [message])


def read_image(path, *, exif_orientation=True, max_pixels=MAX_PIXELS):
    """One image file as `from_directory` decodes it, before channels and resizing: what training sees of it.

    Args:
        path: str, a JPEG, PNG, BMP, GIF or WebP file.
        exif_orientation: bool, default True: turned upright by its EXIF
            Orientation tag (`keras_vit.data.exif`), as `from_directory` does.
        max_pixels: int or None, default `MAX_PIXELS` (89,478,485, PIL's
            `Image.MAX_IMAGE_PIXELS`): a file whose header gives more pixels
            (width x height) is refused before it is decoded; None: no limit.

    Returns:
        NumPy float32 `(height, width, c)` in [0, 255], c as stored (1 to 4;
        a GIF's first frame, transparent pixels in their palette colour).

    Raises:
        ValueError: a BMP of a kind it cannot decode, an animated WebP, an
            image of more than `max_pixels` pixels, or a file that cannot be
            read or decoded, naming the file; a bad `max_pixels`.
    """
    path = str(path)
    check_max_pixels(max_pixels)
    gif_flag = check_image_file(path, "`path` is")
    try:
        return file_decoder(True, exif_orientation, max_pixels)(tf.constant(path), tf.constant(gif_flag, tf.int32)).numpy()
    except tf.errors.OpError as e:
        raise ValueError(f"the image file {path!r} cannot be read: {_op_reason(e)}; remove or replace it") from None


def check_max_pixels(max_pixels):
    """Raises ValueError naming `max_pixels` unless it is None or an int >= 1."""
    if max_pixels is not None and (isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels < 1):
        raise ValueError(f"`max_pixels` must be None (no limit) or an int >= 1. Received: max_pixels={max_pixels!r}")


_DECODERS = {}


def file_decoder(gif_test, exif_orientation=True, max_pixels=MAX_PIXELS):
    """`decode_image_file` as one traced `tf.function` of (path, gif_flag) a setting, shared by the whole process.

    `from_directory` calls it twice (the up-front check and the pipeline's map) and `read_image` once a file:
    traced once, each later pipeline or file reuses the graph instead of tracing the EXIF parser and the decoders
    again (about 2 s a trace on this project's AVX2 AMD EPYC: a later `from_directory` of two files 3.6-4.7 s ->
    1.5-2.1 s, benchmarks/findings/suite-time-avx2.md). Inside a `tf.data` map the function is one call op.

    Args:
        gif_test: bool; False leaves out the GIF transparency test (no file is a GIF: `gif_flag` is ignored).
        exif_orientation, max_pixels: as `decode_image_file`.

    Returns:
        A callable of (path: string scalar tensor, gif_flag: int32 scalar tensor) returning float32
        `(height, width, c)` in [0, 255]; it raises tf.errors.OpError (InvalidArgumentError) for a file that
        cannot be read or decoded.
    """
    key = (bool(gif_test), exif_orientation, max_pixels)
    if key not in _DECODERS:
        _DECODERS[key] = tf.function(
            lambda p, flag: decode_image_file(p, flag if gif_test else None, exif_orientation, max_pixels),
            input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.int32)])
    return _DECODERS[key]


def decode_image_file(path, gif_flag, exif_orientation=True, max_pixels=MAX_PIXELS):
    """Reads one image file: float32 `(height, width, c)` in [0, 255], c as stored (1 to 4).

    `gif_flag` >= 0 is the offset of a GIF's transparency flag, cleared
    before decoding: TensorFlow's GIF decoder makes transparent pixels black,
    without it they keep their palette colour, as in PIL. None (no file has
    one) leaves out the test. `exif_orientation`: turn a JPEG, PNG or WebP
    upright by its EXIF Orientation tag (`keras_vit.data.exif`), as photo
    viewers, MediaPipe and browsers show it; False keeps the stored pixels.
    `max_pixels`: an image whose header gives more pixels fails (an
    InvalidArgumentError that says its size) before anything is decoded;
    None: no limit.
    """
    contents = tf.io.read_file(path)
    if max_pixels is not None:
        with tf.control_dependencies([_assert_pixels(contents, max_pixels)]):
            contents = tf.identity(contents)
    return _read_contents(contents, gif_flag, exif.orientation(contents) if exif_orientation else None)


def _read_contents(contents, gif_flag, orientation=None):
    """`decode_image_file` of a file's bytes; `orientation`: None, or the EXIF value (int scalar tensor) to apply."""
    if gif_flag is None:
        return _decode_image(contents, orientation)

    def without_transparency():
        flag = tf.io.decode_raw(tf.strings.substr(contents, gif_flag, 1), tf.uint8)[0]
        cleared = tf.strings.substr(_ALL_BYTES, tf.cast(tf.bitwise.bitwise_and(flag, 0xFE), tf.int32), 1)
        rest = tf.strings.length(contents) - gif_flag - 1
        return tf.strings.join(
            [tf.strings.substr(contents, 0, gif_flag), cleared, tf.strings.substr(contents, gif_flag + 1, rest)]
        )

    contents = tf.cond(gif_flag >= 0, without_transparency, lambda: contents)
    return _decode_image(contents, orientation)


def _decode_image(contents, orientation=None):
    """Decodes JPEG, PNG, BMP, GIF or WebP bytes: float32 `(height, width, c)` in [0, 255], c as stored (1 to 4).

    `orientation`: None, or an EXIF Orientation value (int scalar tensor) applied to the float32 pixels
    (`keras_vit.data.exif.apply`). Not to the decoded 8- or 16-bit ones, a quarter or half of the bytes: on this
    project's AMD EPYC, TensorFlow's oneDNN Transpose logs an ERROR line ("oneDNN supports DT_UINT8 only on
    platforms with AVX-512", then falls back to Eigen) for an integer tensor, identity permutations too.
    """

    def turn(image):
        image = tf.cast(image, tf.float32)
        return image if orientation is None else exif.apply(image, orientation)

    padded = tf.strings.join([tf.strings.substr(contents, 0, 54), b"\0" * 54])  # 54 bytes even from a shorter file
    head = tf.io.decode_raw(tf.strings.substr(padded, 0, 54), tf.uint8)
    is_jpeg = tf.reduce_all(head[:3] == [0xFF, 0xD8, 0xFF])
    is_png = tf.reduce_all(head[:4] == [0x89, 0x50, 0x4E, 0x47])
    is_png16 = is_png & (head[24] == 16)  # bit depth in the IHDR chunk
    is_indexed_bmp = (head[0] == ord("B")) & (head[1] == ord("M")) & (head[28] <= 8) & (head[29] == 0)
    branch = tf.where(is_jpeg, 1, tf.where(is_png16, 2, tf.where(is_indexed_bmp, 3, 0)))
    return tf.switch_case(
        branch,
        [
            # PNG up to 8 bits, 24- and 32-bit BMP, GIF (first frame).
            lambda: turn(tf.io.decode_image(contents, channels=0, expand_animations=False)),
            lambda: turn(tf.io.decode_jpeg(contents, dct_method="INTEGER_ACCURATE")),
            lambda: turn(tf.io.decode_png(contents, dtype=tf.uint16)) / 257.0,  # 65535 -> 255
            lambda: _decode_indexed_bmp(contents, head),  # a BMP carries no EXIF
        ],
    )


def _decode_indexed_bmp(contents, head):
    """Decodes an uncompressed 1-, 4- or 8-bit palette BMP (TensorFlow reads 8-bit indices as grey, no fewer bits).

    `head`: the first 54 bytes as uint8. Returns float32 `(height, width, 3)` RGB in [0, 255].
    """
    b = tf.cast(head, tf.int64)

    def field(i, n):  # little-endian unsigned int of n bytes at offset i
        return tf.reduce_sum(b[i : i + n] * tf.constant([1, 1 << 8, 1 << 16, 1 << 24][:n], tf.int64))

    offset, header_size, width, height, bpp, used = (
        field(10, 4), field(14, 4), field(18, 4), field(22, 4), field(28, 2), field(46, 4)
    )
    height = tf.where(height >= 1 << 31, height - (1 << 32), height)  # signed: negative for top-down rows
    rows, stride, per_byte = tf.abs(height), (width * bpp + 31) // 32 * 4, 8 // bpp
    levels = tf.bitwise.left_shift(tf.constant(1, tf.int64), bpp)  # 2, 16 or 256 palette indices
    packed = tf.reshape(tf.io.decode_raw(tf.strings.substr(contents, offset, stride * rows), tf.uint8), [rows, stride])
    shifts = tf.cast(8 - bpp * (tf.range(per_byte) + 1), tf.uint8)  # most significant bits first
    indices = tf.bitwise.bitwise_and(tf.bitwise.right_shift(packed[:, :, None], shifts), tf.cast(levels - 1, tf.uint8))
    indices = tf.reshape(indices, [rows, stride * per_byte])[:, :width]
    order = tf.range(rows)
    indices = tf.gather(indices, tf.where(height > 0, rows - 1 - order, order))  # bottom-up rows are stored last first
    colours = tf.where(used > 0, tf.minimum(used, levels), levels)
    table = tf.io.decode_raw(tf.strings.substr(contents, 14 + header_size, 4 * colours), tf.uint8)
    table = tf.pad(tf.reshape(table, [colours, 4])[:, 2::-1], [[0, 256 - colours], [0, 0]])  # BGR0 -> RGB
    return tf.cast(tf.gather(table, tf.cast(indices, tf.int32)), tf.float32)
