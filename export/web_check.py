"""Verify artifacts in a browser: MediaPipe Tasks for Web and onnxruntime-web in headless Chromium (`--web-check`).

Web apps run the same files as phones: a `.tflite` with metadata through MediaPipe Tasks for Web's
`ImageClassifier` (`@mediapipe/tasks-vision`), an `.onnx` through onnxruntime-web (WASM). This module serves
`export/web/runner.html` and the npm packages beside it on 127.0.0.1 (a port of the system's choosing, with the
cross-origin isolation headers WASM threads need), opens it in the system's Chromium (Debian's `chromium`,
driven by Playwright: no browser download), and runs each file's verification images through the page:

- a `.tflite` file gets uint8 RGB frames at its own size, as a canvas or camera gives them
  (`export.mediapipe_check.to_frames`); its scores are compared with the Keras model's outputs on those same
  rounded frames;
- an `.onnx` file gets the float32 images onnxruntime gets; its outputs are compared with the same reference.

The bars are the file's own (`export.tolerances`, by its quantisation): those LiteRT and onnxruntime are held
to. Requests to any other host are blocked (MediaPipe's web bundle posts usage logs to Google).

What it needs, installed by `make` (docs/web.md): Debian's `chromium` (or `KERAS_VIT_CHROMIUM`, a Chromium or
Chrome binary), the Python package `playwright` (the `export` extra), and the npm packages pinned in
`export/web/package.json` in `export/web/node_modules` (`npm ci --prefix export/web`; or
`KERAS_VIT_WEB_MODULES`, a `node_modules` folder holding them). `missing()` names what is not there.
"""

import base64
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading

import numpy as np

from export.mediapipe_check import to_frames
from export.scores import CLASSLESS, describe_output
from export.tolerances import compare, failures
from export.verify import artifact_inputs, reference_outputs

WEB_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "web")
PACKAGES = ("@mediapipe/tasks-vision", "onnxruntime-web")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
INSTALL_HINT = ("run `make install` in a clone of keras_vit (it installs all three), or: apt-get install chromium; "
                "pip install playwright; npm ci --prefix export/web")
PAGE_TIMEOUT_MS = 120_000


class WebCheckUnavailable(RuntimeError):
    """The browser runtime is not installed; the message names what is missing and how to install it."""


def node_modules():
    """The `node_modules` folder with the pinned npm packages: `KERAS_VIT_WEB_MODULES`, else `export/web/node_modules`."""
    return os.environ.get("KERAS_VIT_WEB_MODULES") or os.path.join(WEB_DIR, "node_modules")


def chromium():
    """The Chromium binary: `KERAS_VIT_CHROMIUM`, else the first of `CHROMIUM_NAMES` on PATH; None if none."""
    named = os.environ.get("KERAS_VIT_CHROMIUM")
    if named:
        return named if os.path.isfile(named) and os.access(named, os.X_OK) else None
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


def chromium_version(path):
    """`path --version`'s line if it names Chromium or Chrome (e.g. "Chromium 156.0.8078.114"), else None."""
    try:
        line = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return line if "chrom" in line.lower() else None


def package_version(name):
    """The installed version of npm package `name` (one of `PACKAGES`), or None when it is not installed."""
    try:
        with open(os.path.join(node_modules(), name, "package.json")) as f:
            return json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        return None


def missing():
    """What the browser check lacks, one phrase each (empty when everything is installed)."""
    lacks = []
    named = os.environ.get("KERAS_VIT_CHROMIUM")
    found = chromium()
    if found is None or chromium_version(found) is None:
        lacks.append(f"a Chromium binary, and KERAS_VIT_CHROMIUM={named!r} is not one (point it at chromium or "
                     "chrome, or unset it)" if named else "Chromium (Debian package `chromium`)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        lacks.append("the Python package `playwright`")
    absent = [name for name in PACKAGES if package_version(name) is None]
    if absent:
        lacks.append(f"the npm packages {', '.join(absent)} in {node_modules()}")
    return lacks


def check_available():
    """Raises `WebCheckUnavailable` naming what is missing and how to install it; returns None when all is there."""
    lacks = missing()
    if lacks:
        raise WebCheckUnavailable(f"the browser check (--web-check) needs {'; '.join(lacks)}: {INSTALL_HINT}")


def runtimes():
    """`{"tflite": "MediaPipe Tasks for Web x.y.z", "onnx": "onnxruntime-web x.y.z (WASM)"}`, from the installed packages."""
    return {"tflite": f"MediaPipe Tasks for Web {package_version(PACKAGES[0])}",
            "onnx": f"onnxruntime-web {package_version(PACKAGES[1])} (WASM)"}


GRID = 8  # Browser.file_views: cells a side whose mean colours compare a file's two decodings


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with the headers that make the page cross-origin isolated (WASM threads need SharedArrayBuffer)."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".wasm": "application/wasm", ".tflite": "application/octet-stream",
                      ".onnx": "application/octet-stream"}

    def end_headers(self):
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, *args):  # quiet
        pass


def serve(folder):
    """Serves `folder` on 127.0.0.1 (a free port) in a daemon thread; returns `(server, base URL)`. Close with
    `server.shutdown(); server.server_close()`."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=folder))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def launch(playwright, extra_args=()):
    """Headless Chromium (`chromium()`) through Playwright, without a sandbox when run as root (as in a container);
    `extra_args`: more Chromium flags (e.g. a fake camera)."""
    args = ["--disable-dev-shm-usage"] + (["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])
    return playwright.chromium.launch(executable_path=chromium(), headless=True, args=args + list(extra_args))


def local_only(page, base):
    """Blocks every request of `page` that does not go to `base` (MediaPipe's usage logs, any CDN)."""
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith(base) else route.abort())


class Browser:
    """The runner page open in headless Chromium; a context manager (`with Browser() as browser:`).

    Raises:
        WebCheckUnavailable: on entry, when Chromium, playwright or the npm packages are missing.
        RuntimeError: on entry, when the page does not load its runtimes (its console's errors are named).
    """

    def __enter__(self):
        check_available()
        from playwright.sync_api import sync_playwright

        self._root = tempfile.mkdtemp(prefix="keras-vit-web-")
        os.symlink(node_modules(), os.path.join(self._root, "node_modules"))
        shutil.copy(os.path.join(WEB_DIR, "runner.html"), self._root)
        self._files = 0
        self._server, self._base = serve(self._root)
        self._playwright = sync_playwright().start()
        try:
            try:
                self._browser = launch(self._playwright)
            except Exception as e:  # the binary is there but does not start (no display libraries, a bad build)
                first = next((line.strip() for line in str(e).splitlines() if line.strip()), "")
                raise WebCheckUnavailable(f"Chromium ({chromium()}) did not start: {first[:300]}") from None
            self.page = self.new_page()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def new_page(self):
        """Another page of the runner, with runtimes of its own (onnxruntime-web reads its thread count once a
        page); pass it as `page` to `mediapipe_scores` / `onnx_outputs`.

        Raises:
            RuntimeError: the page does not load its runtimes (its errors are named).
        """
        page = self._browser.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        local_only(page, self._base)
        page.goto(f"{self._base}/runner.html")
        try:
            page.wait_for_function("window.runtimesReady === true", timeout=PAGE_TIMEOUT_MS)
        except Exception:
            raise RuntimeError(f"the browser runtimes did not load: {'; '.join(errors) or 'no error shown'}") from None
        return page

    def __exit__(self, *exc):
        for close in (lambda: self._browser.close(), self._playwright.stop, self._server.shutdown,
                      self._server.server_close, lambda: shutil.rmtree(self._root, ignore_errors=True)):
            try:
                close()
            except Exception:  # closing what never opened
                pass

    def _url(self, path):
        """Serves the file `path` (linked, not copied) and returns its URL."""
        self._files += 1
        name = f"{self._files}_{os.path.basename(path)}"
        os.symlink(os.path.abspath(path), os.path.join(self._root, name))
        return f"{self._base}/{name}"

    def mediapipe_scores(self, path, frames, classes, runs=0, page=None):
        """MediaPipe Tasks for Web's `ImageClassifier` on uint8 RGB `frames` `(n, h, w, 3)` (in `page`, default
        the first).

        Returns:
            `(scores, times)`: float32 `(n, classes)`, each category's score at its index (0 where MediaPipe
            gives none), and the milliseconds of `runs` more calls on the first frame (`performance.now()`).
        """
        frames = np.ascontiguousarray(frames, dtype=np.uint8)
        n, h, w, _ = frames.shape
        result = (page or self.page).evaluate(
            "([url, b64, n, h, w, classes, runs]) => mediapipeScores(url, b64, n, h, w, classes, runs)",
            [self._url(path), base64.b64encode(frames.tobytes()).decode(), n, h, w, classes, runs])
        return np.asarray(result["scores"], "float32").reshape(n, classes), list(result["times"])

    def file_views(self, files, grid=GRID):
        """Each image file as the `--web` page opens it (`createImageBitmap`, upright by its EXIF orientation, no
        colour-space conversion): a list of `{"width", "height", "means"}` (means: float `(grid, grid, 3)`, the
        mean R, G, B of each cell in [0, 255]) or `{"error": why}`, one per file."""
        views = self.page.evaluate("([urls, grid]) => fileViews(urls, grid)", [[self._url(f) for f in files], grid])
        for view in views:
            if "means" in view:
                view["means"] = np.asarray(view["means"], "float32").reshape(grid, grid, 3)
        return views

    def onnx_outputs(self, path, images, threads=1, runs=0, page=None):
        """onnxruntime-web (WASM, `threads` threads) on float32 `images` `(n, h, w, c)`, one image a call (in
        `page`, default the first; a page keeps the thread count of its first call).

        Returns:
            `(outputs, times)`: float32 `(n, *output shape)`, and the milliseconds of `runs` more calls on the
            first image.

        Raises:
            RuntimeError: more than one thread asked of a page that is not cross-origin isolated.
        """
        images = np.ascontiguousarray(images, dtype=np.float32)
        result = (page or self.page).evaluate(
            "([url, b64, n, shape, threads, runs]) => onnxOutputs(url, b64, n, shape, threads, runs)",
            [self._url(path), base64.b64encode(images.tobytes()).decode(), len(images), list(images.shape[1:]),
             threads, runs])
        if threads > 1 and not result["isolated"]:
            raise RuntimeError("onnxruntime-web runs one thread: the page is not cross-origin isolated")
        return np.asarray(result["outputs"], "float32").reshape(len(images), -1), list(result["times"])


def web_figures(browser, artifact, row, images, labels, reference_fn, inputs, measure_latency=True):
    """The browser's figures for one verified artifact's row (`export.verify.verify`), compared with Keras.

    Args:
        browser: an open `Browser`.
        artifact: the `export.verify.Artifact` (its file at `artifact.path`).
        row: its verification row: `scores` ("probabilities", "logits", "outputs" or "tokens"); the artifact is a
            .tflite or .onnx file (a SavedModel has no browser runtime).
        images: float32 `(n, h, w, c)` in [-1, 1], the verification images.
        labels: optional int `(n,)`.
        reference_fn: `rounded -> the Keras model's outputs` on `images` (as the artifact's, float32), or with
            `rounded` True on the uint8 frames MediaPipe is given (`to_frames(images)`, back in [-1, 1]).
        inputs: the images as the artifact takes them (`export.verify.artifact_inputs`), for ONNX files.
        measure_latency: bool: also the median batch-1 latency in the browser (ms, 10 calls, one thread).

    Returns:
        A dict: `web_runtime`; then either `web_unsupported` (why the runtime does not take this file, or its
        first error line where it refused to load or run it: reported, as `export.mediapipe_check` does) or the
        `export.tolerances.compare` figures prefixed `web_` (`web_top1_agreement`, `web_max_abs_diff`, ...),
        `web_latency_ms_batch1` and `web_failures` (the file's own bars broken in the browser; empty if none).
    """
    kind = row["scores"]
    out = {"web_runtime": runtimes()[artifact.format]}
    if artifact.format == "tflite" and kind in CLASSLESS:
        shape = describe_output(kind, shape=False)
        return {**out, "web_unsupported": f"MediaPipe's ImageClassifier reads classes; the file outputs {shape}"}
    if artifact.format == "tflite" and artifact.dynamic_size:
        return {**out, "web_unsupported": "not run: the file's height and width are dynamic (MediaPipe resizes "
                                          "frames to the input tensor's size)"}
    runs = 10 if measure_latency else 0
    try:
        if artifact.format == "tflite":
            reference = reference_fn(True)  # on what MediaPipe's frames hold
            outputs, times = browser.mediapipe_scores(artifact.path, to_frames(images), reference.shape[-1], runs)
        else:
            reference = reference_fn(False)
            outputs, times = browser.onnx_outputs(artifact.path, inputs, 1, runs)
            outputs = outputs.reshape(reference.shape)
    except Exception as e:  # the runtime refuses this kind of file: reported, not fatal (as MediaPipe in Python)
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return {**out, "web_unsupported": f"{type(e).__name__}: {lines[0][:300] if lines else ''}"}
    figures = compare(reference, outputs, labels, kind)
    out.update({f"web_{key}": value for key, value in figures.items()})
    out["web_failures"] = failures(figures, artifact.quantization)
    if times:
        out["web_latency_ms_batch1"] = float(np.median(times))
    return out


def check_in_browser(model, artifacts, rows, images, labels=None, measure_latency=True):
    """Runs every verified .tflite and .onnx artifact in one headless Chromium; adds `web_figures` to its row.

    A file its browser runtime runs outside the file's own bars fails: its row gets the reasons under
    `failures` (prefixed "in the browser:") and `passed` False. A file the runtime does not take
    (`web_unsupported`: a token-sequence or dynamic-size .tflite, or one the runtime refuses to load) is
    reported ("n/a" in the table) and keeps its verdict, as with MediaPipe in Python.

    Args:
        model: the `export.signature.ServingGraph` (or Keras model) the artifacts were exported from.
        artifacts: the `export.verify.Artifact`s, in the order of `rows`.
        rows: `export.verify.verify`'s rows of those artifacts; updated in place.
        images: float32 `(n, h, w, c)` in [-1, 1]; labels: optional int `(n,)`.
        measure_latency: bool: the median batch-1 latency in the browser too (`web_latency_ms_batch1`).

    Raises:
        WebCheckUnavailable: Chromium, playwright or the npm packages are missing.
    """
    checked = [(a, r) for a, r in zip(artifacts, rows) if a.format in ("tflite", "onnx") and r.get("passed")]
    if not checked:
        return
    images = np.asarray(images, dtype="float32")
    rounded = to_frames(images).astype("float32") / 127.5 - 1.0  # the frames MediaPipe is given, in [-1, 1]
    references = {}  # the Keras model runs once per score kind and set of images, not once per file

    def reference(scores, on_frames):
        if (scores, on_frames) not in references:
            references[scores, on_frames] = reference_outputs(model, rounded if on_frames else images, scores)
        return references[scores, on_frames]

    with Browser() as browser:
        for artifact, row in checked:
            figures = web_figures(browser, artifact, row, images, labels,
                                  lambda on_frames, scores=artifact.scores: reference(scores, on_frames),
                                  artifact_inputs(model, artifact, images), measure_latency)
            row.update(figures)
            if figures.get("web_failures"):
                row["failures"] = row.get("failures", []) + [f"in the browser: {f}" for f in figures["web_failures"]]
                row["passed"] = False
