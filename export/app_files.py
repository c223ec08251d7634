"""Verification on the original files, as an app opens them (issue 43, item 2).

Verification compares the artifacts with the Keras model on images that `keras_vit.data` decoded. An app does
not get those arrays: it opens the file. Where the two decoders disagree about a file (an EXIF Orientation tag
that one applies and the other does not, issue 43), the app classifies another picture than the one that was
verified, and no figure computed on the arrays can show it. So, when the verification images come from an image
folder, each held-out file is also opened as MediaPipe Tasks opens it (`mp.Image.create_from_file`):

- a file MediaPipe decodes to another picture than keras_vit.data (`export.mediapipe_check.files_seen_differently`)
  fails every .tflite file's verification, naming the file and what MediaPipe sees;
- each .tflite file that MediaPipe runs classifies the files themselves (MediaPipe resizes them), and its
  top-1 agreement with the Keras model on the same files is reported (`mediapipe_files_top1_agreement`; the
  resizing differs, `export.mediapipe_check.classify`, so it is a figure, not a bar).

A file MediaPipe cannot open (a WebP file, in MediaPipe 1.2.3 for Python) is listed, not failed: an app cannot
hand it to MediaPipe either.
"""

import os

import numpy as np

from export import mediapipe_check
from export.scores import decision_scores
from export.verify import reference_outputs
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


def check(graph, results, files, images):
    """Opens the verification files as MediaPipe does; fails the .tflite rows of `results` when it sees another
    picture, and adds each run row's `mediapipe_files_top1_agreement`.

    Args:
        graph: the `ServingGraph` the artifacts came from (the Keras reference).
        results: the rows of `export.verify.verify` (changed in place).
        files: list of str, the files of `images`, in order.
        images: float32 `(n, h, w, c)` in [-1, 1]: the same files as keras_vit.data decoded and resized them.

    Returns:
        The report's `"app_files"` dict: `files` (count), `seen_differently` and `not_opened` (lists of
        {"file", "why"}), or {"skipped": why} without MediaPipe.
    """
    ok, reason = mediapipe_check.available()
    if not ok:
        return {"skipped": reason}
    different, unopened = mediapipe_check.files_seen_differently(files)
    summary = {"files": len(files), "seen_differently": [{"file": f, "why": w} for f, w in different],
               "not_opened": [{"file": f, "why": w} for f, w in unopened]}
    if different:
        names = "; ".join(f"{f}: {w}" for f, w in different[:LISTED]) + ("; ..." if len(different) > LISTED else "")
        failure = (f"MediaPipe opens {len(different)} of the {len(files)} verification files as another picture than "
                   f"keras_vit.data, so an app would classify what was not verified ({names}); save them upright "
                   "without an EXIF orientation tag, or see docs/app_contract.md (Photos)")
    for row in results:
        if row["format"] != "tflite" or row.get("path") is None or row.get("scores") == "tokens":
            continue
        if different:
            row["failures"].append(failure)
            row["passed"] = False
        if "mediapipe_top1_agreement" not in row or not row["passed"]:
            continue  # MediaPipe does not run this file (or it failed): its figures already say why
        scores, missing = mediapipe_check.classify_files(row["path"], files, graph.classes)
        keep = np.setdiff1d(np.arange(len(files)), missing)
        reference = decision_scores(reference_outputs(graph, images[keep], row["scores"]), row["scores"]).argmax(-1)
        top = decision_scores(scores[keep], row["scores"]).argmax(-1)
        if len(keep):
            row["mediapipe_files_top1_agreement"] = float((top == reference).mean())
    return summary
