"""EXIF orientation, read and applied with TensorFlow ops inside the tf.data pipeline (issue 43).

A phone stores a portrait photo's pixels as the sensor saw them and writes an
EXIF Orientation tag (TIFF tag 0x0112, values 1-8) that says how to turn them
upright. Photo viewers, MediaPipe Tasks and browsers apply it; TensorFlow's
decoders (`tf.io.decode_jpeg`, `keras.utils.image_dataset_from_directory`)
do not. `orientation(contents)` finds the tag in a file's bytes:

- JPEG: the APP1 segment that starts with "Exif\\0\\0", found by walking the
  segments before the first scan (JPEG, ITU-T T.81, Annex B; Exif 2.32,
  section 4.5.4);
- PNG: the eXIf chunk before the first IDAT chunk (PNG, third edition,
  section 11.3.6);
- WebP: the EXIF chunk of an extended (VP8X) file (WebP container
  specification), with or without an "Exif\\0\\0" prefix;

then reads IFD0 of the TIFF structure inside (TIFF 6.0, section 2: byte order
"II" or "MM", the IFD offset, 12-byte entries) for tag 0x0112. `apply(image,
orientation)` turns a decoded `(height, width, c)` image upright, as PIL's
`ImageOps.exif_transpose` does (the independent reference of the tests):

    1 as stored          2 mirrored left-right   3 turned 180 degrees
    4 mirrored top-bottom 5 transposed            6 turned 90 degrees clockwise
    7 transversed        8 turned 90 degrees counter-clockwise

Every other value (none, 0, 9 and up, a damaged or cut-short structure) reads
as 1: the stored pixels. Only the first `HEAD_BYTES` of a JPEG or PNG are
searched (EXIF sits at the start of both); a WebP's chunks are walked over the
whole file (its EXIF chunk usually comes after the image data).
"""

from keras_vit.common.backend import tensorflow

tf = tensorflow("EXIF orientation (keras_vit.data)")

HEAD_BYTES = 1 << 17  # a JPEG's APP segments and a PNG's chunks before IDAT: EXIF lies here
_MAX_SEGMENTS = 64  # JPEG segments or PNG / WebP chunks walked before giving up (stored pixels)
_MAX_ENTRIES = 256  # IFD0 entries read
_ORIENTATION_TAG = 0x0112


def _u(b, at, n, big_endian):
    """Unsigned integer of `n` bytes at `at` (int64 scalar) of uint8 vector `b`; 0 for bytes past its end."""
    idx = at + tf.range(n, dtype=tf.int64)
    inside = (idx >= 0) & (idx < tf.size(b, out_type=tf.int64))
    vals = tf.where(inside, tf.cast(tf.gather(b, tf.clip_by_value(idx, 0, tf.maximum(tf.size(b, tf.int64) - 1, 0))),
                                    tf.int64), 0)
    weights = tf.bitwise.left_shift(tf.constant(1, tf.int64), 8 * tf.range(n, dtype=tf.int64))
    weights = tf.cond(big_endian, lambda: tf.reverse(weights, [0]), lambda: weights)
    return tf.reduce_sum(vals * weights)


def _u16s(b, positions, big_endian):
    """The unsigned 16-bit integers at each of `positions` (int64 vector) of `b`; 0 past its end."""
    idx = positions[:, None] + tf.constant([0, 1], tf.int64)
    last = tf.maximum(tf.size(b, tf.int64) - 1, 0)
    vals = tf.where((idx >= 0) & (idx <= last) & (tf.size(b) > 0),
                    tf.cast(tf.gather(b, tf.clip_by_value(idx, 0, last)), tf.int64), 0)
    return tf.where(big_endian, vals[:, 0] * 256 + vals[:, 1], vals[:, 1] * 256 + vals[:, 0])


def _matches(b, at, text):
    """True where the bytes of `b` at `at` are `text` (bytes)."""
    return tf.equal(_u(b, at, len(text), tf.constant(True)), int.from_bytes(text, "big"))


def _tiff_orientation(b, tiff):
    """The Orientation value of IFD0 of the TIFF structure at `tiff` in `b` (int64), or 1 (none, damaged)."""
    order = _u(b, tiff, 2, tf.constant(True))
    big = tf.equal(order, 0x4D4D)  # "MM"
    valid = (big | tf.equal(order, 0x4949)) & tf.equal(_u(b, tiff + 2, 2, big), 42)  # "II"; the TIFF magic 42
    ifd = tiff + _u(b, tiff + 4, 4, big)
    count = tf.minimum(_u(b, ifd, 2, big), _MAX_ENTRIES)
    entries = ifd + 2 + 12 * tf.range(count, dtype=tf.int64)
    tags = _u16s(b, entries, big)
    hit = tf.where(tf.equal(tags, _ORIENTATION_TAG))[:, 0]
    value = tf.cond(tf.size(hit) > 0, lambda: _u(b, entries[hit[0]] + 8, 2, big), lambda: tf.constant(1, tf.int64))
    return tf.where(valid & (value >= 1) & (value <= 8), value, 1)


def _walk(step, start, limit=_MAX_SEGMENTS):
    """Runs `step(pos) -> (next pos, tiff offset or -1, go on)` from `start`; the first offset found, or -1."""
    def body(pos, found, going):
        nxt, tiff, go = step(pos)
        return nxt, tiff, go & (tiff < 0)

    _, found, _ = tf.while_loop(lambda pos, found, going: going, body,
                                (tf.constant(start, tf.int64), tf.constant(-1, tf.int64), tf.constant(True)),
                                maximum_iterations=limit)
    return found


def _jpeg_tiff(b):
    """Offset of the TIFF structure of a JPEG's Exif APP1 segment, or -1."""
    size = tf.size(b, out_type=tf.int64)

    def step(pos):
        marker = _u(b, pos, 2, tf.constant(True))
        length = _u(b, pos + 2, 2, tf.constant(True))
        is_segment = (tf.bitwise.right_shift(marker, 8) == 0xFF) & (marker != 0xFFDA) & (marker != 0xFFD9)
        exif = tf.equal(marker, 0xFFE1) & _matches(b, pos + 4, b"Exif\0\0")
        tiff = tf.where(is_segment & exif, pos + 10, -1)
        return pos + 2 + length, tiff, is_segment & (length >= 2) & (pos + 4 < size)

    return _walk(step, 2)


def _png_tiff(b):
    """Offset of the data of a PNG's eXIf chunk before IDAT, or -1."""
    size = tf.size(b, out_type=tf.int64)

    def step(pos):
        length = _u(b, pos, 4, tf.constant(True))
        exif = _matches(b, pos + 4, b"eXIf")
        more = ~_matches(b, pos + 4, b"IDAT") & ~_matches(b, pos + 4, b"IEND") & (pos + 8 < size)
        return pos + 12 + length, tf.where(exif, pos + 8, -1), more

    return _walk(step, 8)


def _webp_tiff(b):
    """Offset of the TIFF structure in a WebP's EXIF chunk (after an optional "Exif\\0\\0"), or -1."""
    size = tf.size(b, out_type=tf.int64)

    def step(pos):
        length = _u(b, pos + 4, 4, tf.constant(False))
        data = pos + 8
        exif = _matches(b, pos, b"EXIF")
        tiff = tf.where(_matches(b, data, b"Exif\0\0"), data + 6, data)
        return data + length + length % 2, tf.where(exif, tiff, -1), pos + 8 < size

    return _walk(step, 12)


def orientation(contents):
    """The EXIF Orientation of an image file's bytes: an int64 scalar in 1..8 (1 when the file has none).

    Args:
        contents: a scalar string tensor, the whole file (JPEG, PNG, WebP; any
            other format gives 1).

    Returns:
        int64 scalar tensor, 1 to 8 (TIFF tag 0x0112; see the module doc).
    """
    head = tf.io.decode_raw(tf.strings.substr(contents, 0, HEAD_BYTES), tf.uint8)
    is_jpeg = _matches(head, 0, b"\xff\xd8\xff")
    is_png = _matches(head, 0, b"\x89PNG")
    is_webp = _matches(head, 0, b"RIFF") & _matches(head, 8, b"WEBPVP8X")

    def from_head(find):
        tiff = find(head)
        return tf.cond(tiff >= 0, lambda: _tiff_orientation(head, tiff), lambda: tf.constant(1, tf.int64))

    def from_webp():
        whole = tf.io.decode_raw(contents, tf.uint8)
        tiff = _webp_tiff(whole)
        return tf.cond(tiff >= 0, lambda: _tiff_orientation(whole, tiff), lambda: tf.constant(1, tf.int64))

    branch = tf.where(is_jpeg, 1, tf.where(is_png, 2, tf.where(is_webp, 3, 0)))
    return tf.switch_case(tf.cast(branch, tf.int32), [
        lambda: tf.constant(1, tf.int64),
        lambda: from_head(_jpeg_tiff),
        lambda: from_head(_png_tiff),
        from_webp,
    ])


def apply(image, value):
    """Turns a decoded image upright by its EXIF Orientation `value` (1..8), as `PIL.ImageOps.exif_transpose`.

    Args:
        image: `(height, width, c)` tensor, any dtype.
        value: int scalar tensor, 1 to 8 (others leave `image` as it is).

    Returns:
        The same dtype and c; `(width, height, c)` for values 5 to 8.
    """
    transposed = tf.transpose(image, [1, 0, 2])
    cases = [
        lambda: image,  # 1 (and any other value)
        lambda: tf.reverse(image, [1]),  # 2
        lambda: tf.reverse(image, [0, 1]),  # 3
        lambda: tf.reverse(image, [0]),  # 4
        lambda: transposed,  # 5
        lambda: tf.reverse(transposed, [1]),  # 6: 90 degrees clockwise
        lambda: tf.reverse(transposed, [0, 1]),  # 7
        lambda: tf.reverse(transposed, [0]),  # 8: 90 degrees counter-clockwise
    ]
    value = tf.cast(value, tf.int32)
    return tf.switch_case(tf.where((value >= 1) & (value <= 8), value - 1, 0), cases)
