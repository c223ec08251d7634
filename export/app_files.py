"""Verification on the original files, as an app opens them (issue 43, item 2).

Verification compares the artifacts with the Keras model on images that `keras_vit.data` decoded. An app does
not get those arrays: it opens the file. Where the two decoders disagree about a file (an EXIF Orientation tag
that one applies and the other does not, issue 43), the app classifies another picture than the one that was
verified, and no figure computed on the arrays can show it. So, when the verification images come from an image
folder, each held-out file is also opened as MediaPipe Tasks opens it (`mp.Image.create_from_file`):

- a file MediaPipe decodes to another picture than keras_vit.data (`export.mediapipe_check.files_seen_differently`)
  fails every .tflite file's verification, naming the file and what MediaPipe sees; with `--web-check`, so
  does a file that headless Chromium opens as another picture, as the `--web` page opens it
  (`browser_seen_differently`);
- each .tflite file that MediaPipe runs classifies the files themselves (MediaPipe resizes them), and its
  top-1 agreement with the Keras model on the same files is reported (`mediapipe_files_top1_agreement`; the
  resizing differs, `export.mediapipe_check.classify`, so it is a figure, not a bar).

A file MediaPipe cannot open (a WebP file, in MediaPipe 1.2.3 for Python) is listed, not failed: an app cannot
hand it to MediaPipe either.
"""

import os

import numpy as np

from export import mediapipe_check
from export.scores import CLASSLESS, decision_scores
from export.verify import reference_outputs
from export.web_check import GRID, Browser
from keras_vit.data.image_folder import list_image_folder

FOLDER_SPLIT = {"validation_split": 0.2, "seed": 0}  # export.images.load_data's split of an image folder
LISTED = 5  # files named per problem in a failure message


def held_out_files(source, count):
    """The files of an image folder's held-out part, in the order `export.images.load_data` reads its images.

    Args:
        source: the `calibration_data` of the export: only an image folder (a path) has files.
        count: int, how many verification images were read.

    Returns:
        A list of up to `count` paths, or None when `source` is not an image folder.
    """
    if not isinstance(source, (str, os.PathLike)) or not os.path.isdir(source):
        return None
    paths, _, _ = list_image_folder(str(source), subset="validation", **FOLDER_SPLIT)
    return paths[:count]


def check(graph, results, files, images, web=False, mediapipe=True):
    """Opens the verification files as MediaPipe does (and with `web` as the `--web` page does); fails the .tflite
    rows of `results` when either sees another picture, and adds each run row's `mediapipe_files_top1_agreement`.

    Args:
        graph: the `ServingGraph` the artifacts came from (the Keras reference).
        results: the rows of `export.verify.verify` (changed in place).
        files: list of str, the files of `images`, in order.
        images: float32 `(n, h, w, c)` in [-1, 1]: the same files as keras_vit.data decoded and resized them.
        web: bool: also open them in headless Chromium as the `--web` page does (`browser_seen_differently`).
        mediapipe: bool: open them with MediaPipe in Python (False: `--no-mediapipe`).

    Returns:
        The report's `"app_files"` dict: `files` (count), `seen_differently` and `not_opened` (lists of
        {"file", "why"}; `{"skipped": why}` without MediaPipe) and with `web` `browser_seen_differently` and
        `browser_not_opened`.
    """
    ok, reason = mediapipe_check.available() if mediapipe else (False, "--no-mediapipe")
    summary, problems = {"files": len(files)}, []
    if ok:
        different, unopened = mediapipe_check.files_seen_differently(files)
        summary.update(seen_differently=[{"file": f, "why": w} for f, w in different],
                       not_opened=[{"file": f, "why": w} for f, w in unopened])
        problems.append(("MediaPipe", different))
    else:
        summary["skipped"] = reason
    if web:
        different, unopened = browser_seen_differently(files)
        summary.update(browser_seen_differently=[{"file": f, "why": w} for f, w in different],
                       browser_not_opened=[{"file": f, "why": w} for f, w in unopened])
        problems.append(("The browser (the --web page)", different))
    failures = [_failure(app, different, len(files)) for app, different in problems if different]
    for row in results:
        if row["format"] != "tflite" or row.get("path") is None or row.get("scores") in CLASSLESS:
            continue
        if failures:
            row["failures"].extend(failures)
            row["passed"] = False
        if not ok or "mediapipe_top1_agreement" not in row or not row["passed"]:
            continue  # MediaPipe does not run this file (or it failed): its figures already say why
        scores, missing = mediapipe_check.classify_files(row["path"], files, graph.classes)
        keep = np.setdiff1d(np.arange(len(files)), missing)
        reference = decision_scores(reference_outputs(graph, images[keep], row["scores"]), row["scores"]).argmax(-1)
        top = decision_scores(scores[keep], row["scores"]).argmax(-1)
        if len(keep):
            row["mediapipe_files_top1_agreement"] = float((top == reference).mean())
    return summary


def _failure(app, different, count):
    """The failure line of the .tflite rows when `app` opens files of the verification images differently."""
    names = "; ".join(f"{f}: {w}" for f, w in different[:LISTED]) + ("; ..." if len(different) > LISTED else "")
    clear = " (and as RGB without transparency)" if any("transparent pixels" in w for _, w in different) else ""
    return (f"{app} opens {len(different)} of the {count} verification files as another picture than "
            f"keras_vit.data, so an app would classify what was not verified ({names}); save them upright "
            f"without an EXIF orientation tag{clear}, or see docs/app_contract.md (Photos)")


def browser_seen_differently(files):
    """The files that headless Chromium, opening them as the `--web` page does (`createImageBitmap` with the EXIF
    orientation applied, `export.web_check.Browser.file_views`), sees as another picture than keras_vit.data.

    Each file's upright size must be keras_vit.data's (`read_image`), and the mean colour of each cell of an
    8 x 8 grid within `mediapipe_check.SAME_PICTURE_LEVELS` levels on average (two decoders of one JPEG differ by
    about 1; a turned or mirrored picture by tens).

    Returns:
        `(different, unopened)`: lists of `(file, why)`.

    Raises:
        export.web_check.WebCheckUnavailable: Chromium, playwright or the npm packages are missing.
    """
    from keras_vit.data import read_image

    with Browser() as browser:
        views = browser.file_views(files, GRID)
    different, unopened = [], []
    for path, view in zip(files, views):
        if "error" in view:
            unopened.append((path, view["error"]))
            continue
        ours = read_image(path)
        if (view["height"], view["width"]) != ours.shape[:2]:
            different.append((path, f"the browser reads {view['width']}x{view['height']} pixels, keras_vit.data "
                                    f"{ours.shape[1]}x{ours.shape[0]}"))
            continue
        levels = float(np.abs(view["means"] - cell_means(ours, GRID)).mean())
        if levels > mediapipe_check.SAME_PICTURE_LEVELS:
            clear = ours.shape[-1] in (2, 4) and bool((ours[..., -1] < 255).any())
            why = (" (it has transparent pixels: the browser blends them, keras_vit.data keeps their stored colour)"
                   if clear else "")
            different.append((path, f"its {GRID}x{GRID} cells' colours differ by {levels:.1f} levels of 255 on "
                                    f"average{why}"))
    return different, unopened


def cell_means(image, grid):
    """Mean R, G, B `(grid, grid, 3)` of an `(h, w, c)` image (grey repeated, alpha dropped), row `y` in cell row
    `y * grid // h` and column `x` in `x * grid // w`, as `Browser.file_views` splits it."""
    image = np.asarray(image, "float64")
    rgb = np.repeat(image[..., :1], 3, -1) if image.shape[-1] in (1, 2) else image[..., :3]
    h, w = rgb.shape[:2]
    rows, cols = np.arange(h) * grid // h, np.arange(w) * grid // w
    cells = (rows[:, None] * grid + cols[None, :]).ravel()
    counts = np.maximum(np.bincount(cells, minlength=grid * grid), 1)
    sums = np.stack([np.bincount(cells, rgb[..., k].ravel(), minlength=grid * grid) for k in range(3)], -1)
    return (sums / counts[:, None]).reshape(grid, grid, 3)
