"""EXIF orientation, read and applied with TensorFlow ops inside the tf.data pipeline (issue 43).

A phone stores a portrait photo's pixels as the sensor saw them and writes an
EXIF Orientation tag (TIFF tag 0x0112, values 1-8) that says how to turn them
upright. Photo viewers, MediaPipe Tasks and browsers apply it; TensorFlow's
decoders (`tf.io.decode_jpeg`, `keras.utils.image_dataset_from_directory`)
do not. `orientation(contents)` finds the tag in a file's bytes:

- JPEG: the APP1 segment that starts with "Exif\\0\\0" (the first such bytes,
  right after an APP1 marker; JPEG, ITU-T T.81, Annex B; Exif 2.32, section
  4.5.4);
- PNG: the eXIf chunk before the first IDAT chunk (PNG, third edition,
  section 11.3.6);
- WebP: the EXIF chunk of an extended (VP8X) file (WebP container
  specification), with or without an "Exif\\0\\0" prefix;

each found as the first match of its marker in the file's bytes (one
`tf.strings.split`; walking the segments in a `tf.while_loop` of small ops
cost 0.7 ms of CPU a file), then reads IFD0 of the TIFF structure inside
(TIFF 6.0, section 2: byte order "II" or "MM", the IFD offset, 12-byte
entries) for tag 0x0112. `apply(image,
orientation)` turns a decoded `(height, width, c)` image upright, as PIL's
`ImageOps.exif_transpose` does (the independent reference of the tests):

    1 as stored          2 mirrored left-right   3 turned 180 degrees
    4 mirrored top-bottom 5 transposed            6 turned 90 degrees clockwise
    7 transversed        8 turned 90 degrees counter-clockwise

Every other value (none, 0, 9 and up, a damaged or cut-short structure) reads
as 1: the stored pixels. The first `HEAD_BYTES` of a JPEG or PNG are
searched (EXIF sits at the start of both), the whole file where they hold
neither the EXIF marker nor the start of the image data (an ICC profile or
text chunks of more than 64 KiB before the EXIF); a WebP is searched whole
(its EXIF chunk usually comes after the image data). Not read (PIL reads
both; whether an app does is `keras-vit-export`'s app check to find): a PNG's
eXIf chunk after its image data, and ImageMagick's "Raw profile type exif"
text chunk.
"""

from keras_vit.common.backend import tensorflow

tf = tensorflow("EXIF orientation (keras_vit.data)")

HEAD_BYTES = 1 << 16  # a JPEG's first APP segments and a PNG's chunks before IDAT: EXIF lies here (Exif files
# put their APP1 segment right after the start of image; a JFIF file's APP0 takes 18 bytes before it)
_TIFF_BYTES = 1 << 16  # the EXIF block read for IFD0 (a JPEG's APP1 segment holds at most 64 KiB)
_MAX_ENTRIES = 256  # IFD0 entries read
_ORIENTATION_TAG = 0x0112


def _read(b, at, n, big_endian):
    """Unsigned integer of `n` bytes at `at` (int64, any shape) of the uint8 vector `b`, which the caller padded
    so that every index read is inside it; byte order by the bool scalar `big_endian`."""
    idx = tf.expand_dims(at, -1) + tf.range(n, dtype=tf.int64)
    little = tf.constant([1 << (8 * i) for i in range(n)], tf.int64)
    weights = tf.where(big_endian, tf.reverse(little, [0]), little)  # no tf.cond: a branch op costs in tf.data
    return tf.reduce_sum(tf.cast(tf.gather(b, idx), tf.int64) * weights, -1)


def _tiff_orientation(block):
    """The Orientation value of IFD0 of the TIFF structure that starts `block` (scalar string), or 1 (none,
    damaged, cut short)."""
    big = tf.equal(tf.strings.substr(block, 0, 2), b"MM")
    valid = (big | tf.equal(tf.strings.substr(block, 0, 2), b"II"))
    # zeros after the block: every read below stays inside it (IFD offsets are clipped into the block)
    b = tf.io.decode_raw(tf.strings.join([block, b"\0" * (16 + 12 * _MAX_ENTRIES)]), tf.uint8)
    size = tf.cast(tf.strings.length(block), tf.int64)
    valid &= tf.equal(_read(b, tf.constant(2, tf.int64), 2, big), 42)  # the TIFF magic number
    ifd = tf.minimum(_read(b, tf.constant(4, tf.int64), 4, big), size)
    count = tf.minimum(_read(b, ifd, 2, big), _MAX_ENTRIES)
    entries = ifd + 2 + 12 * tf.range(count, dtype=tf.int64)
    hits = tf.where(tf.equal(_read(b, entries, 2, big), _ORIENTATION_TAG))[:, 0]
    hit = tf.concat([hits, [-1]], 0)[0]  # the first entry, or -1
    entry = tf.gather(tf.concat([entries, [0]], 0), tf.maximum(hit, 0))
    # type SHORT (3), as the Exif standard says, or LONG (4), as some writers store it: a value that fits in the
    # entry's 4 bytes sits at their start, so a big-endian LONG's value is in its last 2 of them
    wide = big & tf.equal(_read(b, entry + 2, 2, big), 4)
    value = _read(b, entry + tf.where(wide, tf.constant(10, tf.int64), 8), 2, big)
    return tf.where(valid & (hit >= 0) & (value >= 1) & (value <= 8), value, 1)


def _substr(data, pos, n):
    """Up to `n` bytes of scalar string `data` from byte `pos` (int64), clamped into the string: never an error."""
    return tf.strings.substr(data, tf.clip_by_value(pos, 0, tf.cast(tf.strings.length(data), tf.int64)), n)


def _find(data, pattern):
    """Byte offset (int64 scalar) of the first `pattern` (bytes) in the scalar string `data`, or -1: one C++ op
    (`tf.strings.split` at the first match), not a loop of small ops."""
    pieces = tf.concat([tf.strings.split(data, sep=pattern, maxsplit=1), [""]], 0)
    return tf.where(tf.size(pieces) > 2, tf.cast(tf.strings.length(pieces[0]), tf.int64), -1)


def _tiff_at(contents, tiff):
    """The Orientation of the TIFF structure at byte `tiff` of `contents` (1 when `tiff` < 0 or it is damaged).
    IFD0 lies within the EXIF block, which a JPEG caps at 64 KiB: that much is read."""
    return tf.where(tiff >= 0, _tiff_orientation(_substr(contents, tiff, _TIFF_BYTES)), 1)


def _jpeg_tiff(contents, head):
    """Offset of the TIFF structure of a JPEG's Exif APP1 segment, or -1: the first "Exif\\0\\0" in the head,
    right after an APP1 marker (0xFFE1) and its length."""
    pos = _find(head, b"Exif\0\0")
    app1 = (pos >= 4) & tf.equal(_substr(contents, pos - 4, 2), b"\xff\xe1")
    return tf.where(app1, pos + 6, -1)


def _png_tiff(head):
    """Offset of the data of a PNG's eXIf chunk before the first IDAT chunk, or -1."""
    pos, idat = _find(head, b"eXIf"), _find(head, b"IDAT")
    return tf.where((pos >= 12) & ((idat < 0) | (pos < idat)), pos + 4, -1)


def _webp_tiff(contents):
    """Offset of the TIFF structure in a WebP's EXIF chunk (after an optional "Exif\\0\\0"), or -1."""
    pos = _find(contents, b"EXIF")
    data = pos + 8
    prefixed = tf.equal(_substr(contents, data, 6), b"Exif\0\0")
    return tf.where(pos >= 12, tf.where(prefixed, data + 6, data), -1)


def orientation(contents):
    """The EXIF Orientation of an image file's bytes: an int64 scalar in 1..8 (1 when the file has none).

    Args:
        contents: a scalar string tensor, the whole file (JPEG, PNG, WebP; any
            other format gives 1).

    Returns:
        int64 scalar tensor, 1 to 8 (TIFF tag 0x0112; see the module doc).
    """
    is_jpeg = tf.equal(tf.strings.substr(contents, 0, 3), b"\xff\xd8\xff")
    is_png = tf.equal(tf.strings.substr(contents, 0, 4), b"\x89PNG")
    is_webp = tf.equal(tf.strings.substr(contents, 0, 4), b"RIFF") & tf.equal(
        _substr(contents, tf.constant(8, tf.int64), 8), b"WEBPVP8X")
    head = tf.strings.substr(contents, 0, HEAD_BYTES)
    # A JPEG's metadata segments end at its start of scan (0xFFDA), a PNG's EXIF before its first IDAT: where the
    # head holds neither the EXIF marker nor that end (an ICC profile or text of more than the head before them),
    # the whole file is searched (a JPEG's also where an ICC profile, APP13 or FlashPix segment starts in the head); a WebP always is. No branch ops (a tf.cond or switch_case in a tf.data map costs
    # more than these searches): the search region's length is picked, and the offset of the file's own format.
    # Binary segments (an ICC profile, Photoshop's APP13 with its thumbnail, FlashPix) may hold the bytes of a
    # start of scan: a JPEG that has one in its head and no EXIF there is searched whole too.
    binary = (_find(head, b"ICC_PROFILE\0") >= 0) | (_find(head, b"Photoshop 3.0\0") >= 0) | (
        _find(head, b"FPXR\0") >= 0)
    past_head = (is_jpeg & (_find(head, b"Exif\0\0") < 0) & ((_find(head, b"\xff\xda") < 0) | binary)) | (
        is_png & (_find(head, b"eXIf") < 0) & (_find(head, b"IDAT") < 0))
    length = tf.where(is_webp | past_head, tf.strings.length(contents), tf.where(is_jpeg | is_png, HEAD_BYTES, 0))
    region = tf.strings.substr(contents, 0, length)  # "" for other formats
    tiff = tf.where(is_jpeg, _jpeg_tiff(contents, region), tf.where(is_png, _png_tiff(region), _webp_tiff(region)))
    return _tiff_at(contents, tf.where(is_jpeg | is_png | is_webp, tiff, -1))


def apply(image, value):
    """Turns a decoded image upright by its EXIF Orientation `value` (1..8), as `PIL.ImageOps.exif_transpose`.

    Args:
        image: `(height, width, c)` tensor, any dtype; float32 in `keras_vit.data` (an integer tensor makes
            TensorFlow log an ERROR line on some CPUs, see below).
        value: int scalar tensor, 1 to 8 (others leave `image` as it is).

    Returns:
        The same dtype and c; `(width, height, c)` for values 5 to 8.
    """
    value = tf.cast(value, tf.int32)
    value = tf.where((value >= 1) & (value <= 8), value, 1)
    # 5-8 transpose first; then 2, 3, 6 and 7 flip the columns, 3, 4, 7 and 8 the rows. A permutation and an axis
    # list picked by value, not a switch_case of 8 branches (branch ops cost in a tf.data map; an identity
    # transpose and an empty reverse pass the image through).
    perm = tf.where(value >= 5, tf.constant([1, 0, 2]), tf.constant([0, 1, 2]))
    flips = tf.stack([tf.reduce_any(tf.equal(value, [3, 4, 7, 8])), tf.reduce_any(tf.equal(value, [2, 3, 6, 7]))])
    # ConjugateTranspose is Transpose for real numbers, but Grappler does not move a Cast past it: after
    # `tf.cast(uint8_image, tf.float32)`, its ArithmeticOptimizer turns tf.transpose's float32 input back into
    # uint8 (a quarter of the bytes), and oneDNN's Transpose then logs an ERROR line ("oneDNN supports DT_UINT8
    # only on platforms with AVX-512") on this project's AMD EPYC, which has AVX-512 (docs/traps.md).
    turned = tf.raw_ops.ConjugateTranspose(x=image, perm=perm)
    return tf.reverse(turned, tf.boolean_mask(tf.constant([0, 1]), flips))
