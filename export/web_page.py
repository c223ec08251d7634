"""`keras-vit-export --web DIR`: a static page that classifies images in the browser with an exported `.tflite`.

The folder holds `index.html`, `app.js` (no build step, no framework), the chosen `.tflite` file (with its
metadata: MediaPipe reads the pixel scaling and the class names from it), `labels.txt`, and
`vendor/tasks-vision/` (MediaPipe Tasks for Web's bundle and its WASM files, copied from the pinned npm package,
so the page needs no network). A person serves the folder with any static server
(`python3 -m http.server --directory DIR`), opens it, picks or drops an image or uses the camera, and sees the
top-5 classes with their probabilities and the latency; the page names the file it runs. A file that is not
an image, or a model that fails to load, is said in words on the page (`#status`).
"""

import html
import os
import shutil

from keras_vit.common import files as _files
from export.modes import FLOAT32
from export.scores import CLASSLESS, describe_output
from export.web_check import PACKAGES, WEB_DIR, WebCheckUnavailable, node_modules, package_version

PAGE_FILES = ("index.html", "app.js")
# MediaPipe's FilesetResolver picks the SIMD build, or the one without SIMD on a browser that lacks it.
WASM_FILES = ("vision_wasm_internal.js", "vision_wasm_internal.wasm", "vision_wasm_nosimd_internal.js",
              "vision_wasm_nosimd_internal.wasm")


def choose_artifact(report):
    """The `.tflite` file a page runs: the float32 one if it passed, else the first that passed.

    Args:
        report: `export.pipeline.export_all`'s report.

    Returns:
        The artifact's row (its `path` is the landed file).

    Raises:
        ValueError: no `.tflite` file passed, or the files output a token sequence (no classes to show).
    """
    if report.get("scores") in CLASSLESS:
        raise ValueError(f"--web shows classes, and the model outputs {describe_output(report['scores'])}")
    passed = [r for r in report["artifacts"] if r["format"] == "tflite" and r["passed"] and "web_unsupported" not in r
              and report.get("tflite_image_size") != "dynamic"]
    if not passed:
        raise ValueError("--web needs a fixed-size .tflite file that passed verification (--formats with tflite)")
    return next((r for r in passed if r["quantization"] == FLOAT32), passed[0])


def check_page_target(folder, output_dir, overwrite=False):
    """Checks `--web DIR` before any work: a folder path of its own, apart from the export's folder.

    Raises:
        ValueError: `folder` is empty, an existing file, or the same as / inside / around `output_dir` (replacing
            the page would delete the export, or the export the page).
        FileExistsError: `folder` exists and `overwrite` is False.
    """
    if not folder or not str(folder).strip():
        raise ValueError("--web needs a folder path for the page. Received: --web ''")
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ValueError(f"--web must be a folder, and {folder} is a file. Received: --web {folder}")
    page, out = os.path.realpath(folder), os.path.realpath(output_dir)
    if page == out or page.startswith(out + os.sep) or out.startswith(page + os.sep):
        raise ValueError(f"--web must be a folder of its own, apart from --output-dir (the page's folder is written "
                         f"whole, and --overwrite replaces it). Received: --web {folder}, --output-dir {output_dir}")
    _files.check_target(folder, overwrite)


def check_page_model(model, scores="probabilities", image_size=None):
    """Checks that the page can show `model`'s files, before any work: class probabilities at a fixed size.

    Raises:
        ValueError: the files would output logits, a token sequence or other scores (the page shows
            probabilities), or `image_size` is "dynamic" (MediaPipe runs fixed-size files only).
    """
    from export.scores import score_kind

    kind = score_kind(model, scores)[0]
    if kind != "probabilities":
        raise ValueError(f"--web shows class probabilities, and the files would output {kind}"
                         + (": leave out --scores logits" if scores == "logits" else ""))
    if image_size == "dynamic":
        raise ValueError("--web runs a .tflite file of fixed height and width in MediaPipe: leave out "
                         "--image-size dynamic, or give a size (--image-size H,W)")


def check_page_runtime():
    """Raises `WebCheckUnavailable` unless MediaPipe Tasks for Web is installed (what `write_page` copies)."""
    if package_version(PACKAGES[0]) is None:
        raise WebCheckUnavailable(f"--web needs the npm package {PACKAGES[0]} in {node_modules()}: run `make install` "
                                  "in a clone of keras_vit, or npm ci --prefix export/web")


def write_page(folder, tflite_path, labels, title=None, overwrite=False):
    """Writes the page folder (see the module docstring), staged and moved into place.

    Args:
        folder: the page's folder (created; an existing one only with `overwrite`).
        tflite_path: the `.tflite` file it runs (a classifier with metadata, fixed height and width).
        labels: the class names, in the model's order (written to `labels.txt`).
        title: the page's heading; default: the file's name.
        overwrite: bool: replace an existing `folder`.

    Returns:
        `folder`.

    Raises:
        WebCheckUnavailable: MediaPipe Tasks for Web is not installed (`npm ci --prefix export/web`).
        FileExistsError: `folder` exists and `overwrite` is False.
    """
    check_page_runtime()
    source = os.path.join(node_modules(), PACKAGES[0])
    name = os.path.basename(tflite_path)
    runtime = f"MediaPipe Tasks for Web {package_version(PACKAGES[0])}"
    with _files.staged(folder, overwrite, directory=True) as tmp:
        os.makedirs(os.path.join(tmp, "vendor", "tasks-vision", "wasm"))
        with open(os.path.join(WEB_DIR, "page", "index.html")) as f:
            page = f.read()
        for key, value in (("__TITLE__", title or name), ("__MODEL__", name), ("__RUNTIME__", runtime)):
            page = page.replace(key, html.escape(value))
        with open(os.path.join(tmp, "index.html"), "w") as f:
            f.write(page)
        shutil.copy(os.path.join(WEB_DIR, "page", "app.js"), tmp)
        shutil.copy(tflite_path, os.path.join(tmp, name))
        with open(os.path.join(tmp, "labels.txt"), "w") as f:
            f.write("\n".join(labels) + "\n")
        shutil.copy(os.path.join(source, "vision_bundle.mjs"), os.path.join(tmp, "vendor", "tasks-vision"))
        for wasm in WASM_FILES:
            shutil.copy(os.path.join(source, "wasm", wasm), os.path.join(tmp, "vendor", "tasks-vision", "wasm"))
    return folder
