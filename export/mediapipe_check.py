"""Run a .tflite image classifier the way apps do: MediaPipe Tasks' `ImageClassifier`.

App developers hand a camera frame (uint8 RGB, any size) to
`mediapipe.tasks.python.vision.ImageClassifier` (the successor of the TFLite
Task Library; the same file and options work in its Android, iOS and web
APIs). The classifier reads the file's metadata (normalization mean/std,
labels), resizes the frame to the model's input, runs it and returns
labelled scores that apps filter with `score_threshold`.

`mediapipe` (package `mediapipe==1.2.3`, in the `export` extra) is imported
inside the functions; without it `available()` says why once and
`figures` reports the runtime as skipped.
"""

import numpy as np

_SKIP_SAID = []


def available():
    """Returns `(True, "")` if MediaPipe Tasks can be imported, else `(False, reason)`."""
    try:
        from mediapipe.tasks.python import vision  # noqa: F401
    except Exception as e:  # ImportError, or a binary extension that does not load
        return False, f"mediapipe is not installed or does not import ({type(e).__name__}: {str(e)[:200]})"
    return True, ""


def say_skipped_once(reason):
    """Prints the reason MediaPipe is skipped, once per process."""
    if not _SKIP_SAID:
        _SKIP_SAID.append(reason)
        print(f"MediaPipe check skipped: {reason}; install mediapipe (pip install --no-deps mediapipe==1.2.3 after the export extra, as make install does)", flush=True)


def to_frames(images):
    """Images in [-1, 1] (the Keras model's input) back to uint8 pixels in [0, 255], as an app has them.

    Args:
        images: float `(n, height, width, channels)` scaled by
            `keras_vit.preprocess_input` (x / 127.5 - 1).

    Returns:
        uint8 `(n, height, width, channels)`: round((x + 1) * 127.5), clipped.
    """
    return np.clip(np.rint((np.asarray(images, "float64") + 1.0) * 127.5), 0, 255).astype("uint8")


def _image(frame):
    """A `mediapipe.Image` of one uint8 frame: (h, w) or (h, w, 1) grey, (h, w, 3) RGB or (h, w, 4) RGBA.

    A grey frame is turned into RGB (R = G = B) first: MediaPipe 1.2.3 feeds
    a GRAY8 image to an RGB model as one channel and fails ("TfLiteTensor and
    Tensor sizes do not match", docs/traps.md).
    """
    import mediapipe as mp

    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim not in (2, 3) or (frame.ndim == 3 and frame.shape[-1] not in (1, 3, 4)):
        raise ValueError("a frame must be uint8 (h, w) or (h, w, 1) grey, (h, w, 3) RGB or (h, w, 4) RGBA. "
                         f"Received: frame of dtype {frame.dtype} and shape {frame.shape}")
    if frame.ndim == 2:
        frame = frame[..., None]
    if frame.shape[-1] == 1:
        frame = np.repeat(frame, 3, axis=-1)
    image_format = mp.ImageFormat.SRGB if frame.shape[-1] == 3 else mp.ImageFormat.SRGBA
    return mp.Image(image_format=image_format, data=np.ascontiguousarray(frame))


def classify(path, frames, classes, score_threshold=None, max_results=-1):
    """Classifies uint8 frames with MediaPipe Tasks' `ImageClassifier` (image mode, one frame at a time).

    Args:
        path: a .tflite file with image-classifier metadata.
        frames: uint8 `(n, height, width, channels)` (channels 1, 3 or 4) or
            a list of such frames of any sizes; grey frames are turned into
            RGB; MediaPipe resizes each to the model's input: bilinear on
            pixel corners (TensorFlow 1's `half_pixel_centers=False`), no
            antialiasing, aspect ratio not kept. `keras_vit.data` resizes with
            half-pixel centres and antialiasing: other pixels (docs/traps.md).
        classes: int, the model's number of classes.
        score_threshold: None (all scores) or a float: MediaPipe drops
            categories scoring below it.
        max_results: int, -1 for all categories.

    Returns:
        float32 `(n, classes)`: MediaPipe's score per class index, 0.0 for
        categories it did not return (below the threshold).

    Raises:
        RuntimeError, ValueError: MediaPipe refused the file or a frame
            (raised by MediaPipe itself, e.g. an input type it does not run).
    """
    from mediapipe.tasks.python import vision
    from mediapipe.tasks.python.core.base_options import BaseOptions

    options = {"max_results": max_results}
    if score_threshold is not None:
        options["score_threshold"] = float(score_threshold)
    classifier = vision.ImageClassifier.create_from_options(
        vision.ImageClassifierOptions(base_options=BaseOptions(model_asset_path=str(path)), **options))
    scores = np.zeros((len(frames), classes), "float32")
    with classifier:
        for i, frame in enumerate(frames):
            for category in classifier.classify(_image(frame)).classifications[0].categories:
                scores[i, category.index] = category.score
    return scores


def figures(path, images, reference, labels=None, score_kind="probabilities"):
    """MediaPipe's figures for one .tflite artifact, on the verification images given as uint8 frames.

    Args:
        path: the .tflite file.
        images: float32 `(n, h, w, c)` in [-1, 1], turned into uint8 frames
            (`to_frames`) at the model's own size.
        reference: float32 `(n, classes)`, the Keras model's outputs
            (probabilities or logits, as the artifact's).
        labels: optional int `(n,)`.
        score_kind: "probabilities", "logits" or "outputs".

    Returns:
        A dict: `mediapipe_top1_agreement` (same top-1 as `reference`),
        `mediapipe_accuracy` (with labels), and for probabilities
        `mediapipe_max_score_sum_error` (max |sum of scores - 1|); or
        `mediapipe_skipped` (mediapipe missing) / `mediapipe_unsupported`
        (MediaPipe refused the file: its first error line).
    """
    ok, reason = available()
    if not ok:
        say_skipped_once(reason)
        return {"mediapipe_skipped": reason}
    reference = np.asarray(reference)
    try:
        scores = classify(path, to_frames(images), reference.shape[-1])
    except Exception as e:  # MediaPipe refuses this kind of file: reported, not fatal
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return {"mediapipe_unsupported": f"{type(e).__name__}: {lines[0][:300] if lines else ''}"}
    from export.scores import decision_scores

    top = decision_scores(scores, score_kind).argmax(-1)  # a binary (one-output) file decides by its threshold
    row = {"mediapipe_top1_agreement": float((top == decision_scores(reference, score_kind).argmax(-1)).mean())}
    if labels is not None:
        row["mediapipe_accuracy"] = float((top == np.asarray(labels).reshape(-1)).mean())
    if score_kind == "probabilities" and reference.shape[-1] > 1:
        row["mediapipe_max_score_sum_error"] = float(np.abs(scores.astype("float64").sum(-1) - 1.0).max())
    return row


# Mean absolute difference, in levels of 255, above which MediaPipe's decoding of a file is another picture than
# keras_vit.data's. Two JPEG decoders (MediaPipe's, libjpeg-turbo's accurate integer IDCT) differ by at most 1 level
# (measured on 60 16-px digit JPEGs, tests/export/test_app_files.py); a picture turned by 90 or 180 degrees, or
# mirrored, differs by tens of levels.
SAME_PICTURE_LEVELS = 8.0


def files_seen_differently(files):
    """The files that MediaPipe Tasks (`mp.Image.create_from_file`, what an app hands the classifier) decodes to
    another picture than `keras_vit.data` (`read_image`: what training, calibration and verification see).

    The usual cause is an EXIF Orientation tag (issue 43): keras_vit.data applies it to JPEG, PNG and WebP files;
    MediaPipe 1.2.3 in Python applies it to JPEG files only, and opens no WebP file.

    Args:
        files: list of str, image files (the verification images of an image folder).

    Returns:
        `(different, unopened)`: lists of `(file, why)`: files MediaPipe decodes to another size or other pixels
        (mean absolute difference over `SAME_PICTURE_LEVELS` levels), and files MediaPipe cannot open.
    """
    from keras_vit.data import read_image

    different, unopened = [], []
    for path in files:
        try:
            app = open_file(path).astype("float32")
        except Exception as e:  # e.g. a WebP file: "Failed to load image from file"
            unopened.append((path, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"))
            continue
        ours = read_image(path)
        if app.ndim == 2:
            app = app[..., None]
        stored = read_image(path, exif_orientation=False)
        if app.shape[:2] != ours.shape[:2]:
            turned = " (the stored pixels, without the file's EXIF orientation)" if app.shape[:2] == stored.shape[:2] \
                else ""
            different.append((path, f"MediaPipe reads {app.shape[1]}x{app.shape[0]} pixels{turned}, keras_vit.data "
                                    f"{ours.shape[1]}x{ours.shape[0]}"))
            continue
        levels = _mean_levels(app, ours)
        if levels > SAME_PICTURE_LEVELS:
            turned = " (MediaPipe shows the stored pixels: the file's EXIF orientation is not applied)" \
                if stored.shape == ours.shape and _mean_levels(app, stored) <= SAME_PICTURE_LEVELS else ""
            different.append((path, f"the pixels differ by {levels:.1f} levels of 255 on average{turned}"))
    return different, unopened


def open_file(path):
    """A file's pixels as MediaPipe Tasks opens it for an app (`mp.Image.create_from_file`).

    Args:
        path: str, an image file (MediaPipe 1.2.3 in Python opens JPEG and PNG, applying EXIF orientation to JPEG only).

    Returns:
        uint8 `(h, w, channels)` or `(h, w)`, a copy.

    Raises:
        Whatever MediaPipe raises for a file it cannot open (e.g. `RuntimeError` for a WebP file).

    `numpy_view()` is a view into the `mp.Image`'s own buffer and does not keep the image alive: read from a temporary
    image, the buffer is freed and its first bytes are overwritten (measured: 44 of 60 16-px JPEGs read with up to
    254 levels wrong in the first row). The image is held here until its pixels are copied.
    """
    import mediapipe as mp

    image = mp.Image.create_from_file(str(path))
    pixels = np.array(image.numpy_view(), copy=True)
    del image
    return pixels


def _mean_levels(a, b):
    """Mean absolute difference of two `(h, w, c)` images of one size: colour channels, or grey where one is grey."""
    colours = min(a.shape[-1], b.shape[-1], 3)
    if colours == 1:
        a, b = a[..., :3].mean(-1), b[..., :3].mean(-1)
    else:
        a, b = a[..., :colours], b[..., :colours]
    return float(np.abs(a - b).mean())


def classify_files(path, files, classes):
    """MediaPipe's scores for image files opened as an app does (`mp.Image.create_from_file`; MediaPipe resizes).

    Returns float32 `(len(files), classes)` (0.0 for categories not returned), and the indices of the files MediaPipe
    could not open (their rows stay 0).
    """
    from mediapipe.tasks.python import vision
    from mediapipe.tasks.python.core.base_options import BaseOptions

    classifier = vision.ImageClassifier.create_from_options(
        vision.ImageClassifierOptions(base_options=BaseOptions(model_asset_path=str(path)), max_results=-1))
    scores, unopened = np.zeros((len(files), classes), "float32"), []
    with classifier:
        for i, file in enumerate(files):
            try:
                frame = open_file(file)
            except Exception:
                unopened.append(i)
                continue
            for category in classifier.classify(_image(frame)).classifications[0].categories:
                scores[i, category.index] = category.score
    return scores, unopened
