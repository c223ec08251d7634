"""The browser: MediaPipe Tasks for Web and onnxruntime-web in headless Chromium (`--web-check`), and the page
`keras-vit-export --web DIR` writes, tried in a real browser (issue 31)."""

import json
import os

import numpy as np
import pytest

from export import __main__ as cli
from export.web_check import Browser, launch, local_only, missing, serve

pytestmark = pytest.mark.export
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def exported(trained_vit, tmp_path_factory):
    """The tests' digits ViT exported with --web-check and --web: (output folder, page folder, report)."""
    out = tmp_path_factory.mktemp("web")
    code = cli.main([trained_vit[1], "--formats", "tflite,onnx", "--quantization", "float32,int8",
                     "--onnx-quantization", "float32,dynamic_int8", "--calibration-data", "digits", "--no-latency",
                     "--web-check", "--web", str(out / "page"), "--output-dir", str(out / "files")])
    assert code == 0
    return out / "files", out / "page", json.loads((out / "files" / "report.json").read_text())


def test_the_browser_runtimes_give_keras_top1_within_each_files_bars(exported):
    _, _, report = exported
    assert not missing()
    assert set(report["web_runtimes"]) == {"tflite", "onnx"}
    rows = {r["name"]: r for r in report["artifacts"]}
    assert set(rows) == {"model_float32.tflite", "model_int8.tflite", "model.onnx", "model_dynamic_int8.onnx"}
    assert all(r["passed"] and r["web_failures"] == [] and "web_unsupported" not in r for r in rows.values())
    assert rows["model_float32.tflite"]["web_runtime"].startswith("MediaPipe Tasks for Web ")
    assert rows["model.onnx"]["web_runtime"].startswith("onnxruntime-web ")
    for name in ("model_float32.tflite", "model.onnx"):  # the float32 bar: the browser computes what Keras does
        assert rows[name]["web_relative_max_abs_diff"] <= 2e-5 and rows[name]["web_top1_agreement"] == 1.0, rows[name]
    assert rows["model_int8.tflite"]["web_decisive_top1_agreement"] >= 0.97
    assert rows["model_int8.tflite"]["web_accuracy_drop"] < 0.02
    assert rows["model_dynamic_int8.onnx"]["web_decisive_top1_agreement"] >= 0.98
    for row in rows.values():  # 360 held-out digits: the browser's accuracy is the Python runtime's within a point
        assert abs(row["web_accuracy"] - row["accuracy"]) <= 0.01, row
        assert row["web_keras_accuracy"] > 0.8


def test_the_browser_computes_what_the_python_runtimes_do(exported, trained_vit):
    import onnxruntime

    from export.mediapipe_check import classify, to_frames

    files, _, _ = exported
    images = trained_vit[2][:8]
    session = onnxruntime.InferenceSession(str(files / "model.onnx"), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"images": images})[0]
    frames = to_frames(images)
    with Browser() as browser:
        outputs, times = browser.onnx_outputs(files / "model.onnx", images, threads=2, runs=3)
        scores, _ = browser.mediapipe_scores(files / "model_float32.tflite", frames, 10)
    assert outputs.shape == (8, 10) and len(times) == 3 and min(times) > 0
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(scores, classify(files / "model_float32.tflite", frames, 10), rtol=1e-4, atol=1e-6)


def _page(folder, extra_args=()):
    """(page, close) with `folder` served on 127.0.0.1 and loaded, its model ready or failed."""
    from playwright.sync_api import sync_playwright

    server, base = serve(str(folder))
    playwright = sync_playwright().start()
    browser = launch(playwright, extra_args)
    page = browser.new_page(viewport={"width": 800, "height": 900})
    local_only(page, base)
    page.goto(f"{base}/index.html")
    page.wait_for_function("document.body.dataset.ready !== undefined", timeout=60_000)

    def close():
        browser.close()
        playwright.stop()
        server.shutdown()
        server.server_close()

    return page, close


def test_the_page_classifies_a_digit_given_through_its_file_input(exported, trained_vit, tmp_path):
    from PIL import Image

    from export.mediapipe_check import to_frames

    _, folder, report = exported
    model, _, images, labels = trained_vit
    assert sorted(os.listdir(folder)) == ["app.js", "index.html", "labels.txt", "model_float32.tflite", "vendor"]
    assert (folder / "labels.txt").read_text().split() == report["labels"]
    logits = model.predict(images, verbose=0)
    order = np.sort(logits, -1)
    sure = np.flatnonzero((logits.argmax(-1) == labels) & (order[:, -1] - order[:, -2] > 2.0))
    digit = int(sure[0])
    Image.fromarray(to_frames(images[digit:digit + 1])[0]).save(tmp_path / "digit.png")
    (tmp_path / "notes.txt").write_text("not an image")

    page, close = _page(folder)
    try:
        assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#status")
        assert "model_float32.tflite" in page.inner_text("#model") and "MediaPipe Tasks for Web" in page.inner_text("#model")
        page.set_input_files("#file", str(tmp_path / "digit.png"))
        page.wait_for_selector("#results li")
        shown = page.locator("#results .label").all_inner_texts()
        assert len(shown) == 5 and shown[0] == report["labels"][int(labels[digit])]
        scores = [float(s.rstrip("%")) for s in page.locator("#results .score").all_inner_texts()]
        assert scores == sorted(scores, reverse=True) and scores[0] > 50
        assert "ms in the browser" in page.inner_text("#latency")
        os.makedirs(os.path.join(ROOT, "runs", "web"), exist_ok=True)
        page.screenshot(path=os.path.join(ROOT, "runs", "web", "page.png"), full_page=True)

        page.set_input_files("#file", str(tmp_path / "notes.txt"))
        assert page.get_attribute("#status", "class") == "error"
        assert "notes.txt is not an image" in page.inner_text("#status")
        # the digit's results are gone: they are never read as the text file's
        assert page.locator("#results li").count() == 0 and page.inner_text("#latency") == ""
        assert not page.is_visible("#preview")
    finally:
        close()


def _upright_and_stored(frame, size, turns):
    """`frame` (uint8, h x w x 3) scaled to `size` x `size` (bilinear), and the same turned `turns` quarter turns
    counter-clockwise: the pixels a phone stores for a picture that its EXIF Orientation turns back upright."""
    from PIL import Image

    upright = np.asarray(Image.fromarray(frame).resize((size, size), Image.BILINEAR))
    return upright, np.ascontiguousarray(np.rot90(upright, turns))


def test_the_page_classifies_a_photo_upright_by_its_exif_orientation(exported, trained_vit, tmp_path):
    """Issue 43, item 3: a JPEG stored sideways or upside down with EXIF Orientation 3, 6 or 8, at sizes below, at
    and above the model's 16 x 16 input, gets the upright picture's class on the page. The digit is one whose
    stored pixels the model classifies otherwise at every size (a page that ignored the tag, or classified the
    CSS-scaled preview, would show another class) and whose upright picture it classifies right with a margin."""
    from PIL import Image

    from export.mediapipe_check import to_frames

    _, folder, report = exported
    model, _, images, labels = trained_vit
    frames = to_frames(images)
    sizes, turns = (12, 16, 48), {3: 2, 6: 1, 8: 3}  # np.rot90's counter-clockwise turns that each tag undoes

    def logits(pictures):  # the model on pictures of any size, scaled to its input as an app does
        x = np.stack([np.asarray(Image.fromarray(p).resize((16, 16), Image.BILINEAR)) for p in pictures])
        return model.predict(x.astype("float32") / 127.5 - 1.0, verbose=0)

    def telling(i):
        pairs = [_upright_and_stored(frames[i], size, t) for size in sizes for t in turns.values()]
        upright, stored = logits([p[0] for p in pairs]), logits([p[1] for p in pairs])
        margin = np.sort(upright, -1)[:, -1] - np.sort(upright, -1)[:, -2]
        return bool((upright.argmax(-1) == labels[i]).all() and (margin > 1.0).all()
                    and (stored.argmax(-1) != labels[i]).all())

    digit = next(i for i in range(len(frames)) if telling(i))
    expected = report["labels"][int(labels[digit])]
    page, close = _page(folder)
    try:
        assert page.get_attribute("body", "data-ready") == "true", page.inner_text("#status")
        for size in sizes:
            for value, t in turns.items():
                name = f"photo_{value}_{size}.jpg"
                tags = Image.Exif()
                tags[0x0112] = value
                Image.fromarray(_upright_and_stored(frames[digit], size, t)[1]).save(
                    tmp_path / name, quality=95, exif=tags.tobytes())
                page.set_input_files("#file", str(tmp_path / name))
                page.wait_for_function(f"document.getElementById('status').textContent.includes('{name}')")
                assert page.get_attribute("#status", "class") != "error", page.inner_text("#status")
                shown = page.locator("#results .label").all_inner_texts()
                assert shown[0] == expected, (name, shown)
    finally:
        close()


def test_the_page_opened_as_a_file_says_to_serve_it(exported):
    from playwright.sync_api import sync_playwright

    _, folder, _ = exported
    with sync_playwright() as playwright:
        browser = launch(playwright)
        page = browser.new_page()
        page.goto(f"file://{folder}/index.html")
        assert page.get_attribute("#status", "class") == "error"
        assert page.inner_text("#status").startswith("Open this page through a web server, not as a file")
        browser.close()


def test_the_page_classifies_a_camera_frame(exported):
    _, folder, report = exported
    # Chromium's own test camera (a moving pattern) and an allowed permission prompt
    page, close = _page(folder, ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"])
    try:
        page.click("#camera")
        page.wait_for_selector("#snap:not([hidden])")
        page.click("#snap")
        page.wait_for_selector("#results li")
        assert page.inner_text("#status") == "Classified the camera frame."
        shown = page.locator("#results .label").all_inner_texts()
        assert len(shown) == 5 and set(shown) <= set(report["labels"])
    finally:
        close()


def test_a_model_that_fails_to_load_is_said_on_the_page(exported, tmp_path):
    import shutil

    _, folder, _ = exported
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    (broken / "model_float32.tflite").write_bytes(b"not a model")
    page, close = _page(broken)
    try:
        assert page.get_attribute("body", "data-ready") == "failed"
        assert page.get_attribute("#status", "class") == "error"
        assert page.inner_text("#status").startswith("The model failed to load (model_float32.tflite)")
    finally:
        close()


def test_without_chromium_or_npm_packages_web_check_exits_2_before_any_work(trained_vit, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERAS_VIT_CHROMIUM", str(tmp_path / "no-chromium"))
    monkeypatch.setenv("KERAS_VIT_WEB_MODULES", str(tmp_path / "node_modules"))
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--web-check", "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert "--web-check" in error and "no-chromium" in error and "is not one (point it at chromium" in error
    assert "@mediapipe/tasks-vision, onnxruntime-web" in error and "make install" in error
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--web", str(tmp_path / "page"), "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "--web needs the npm package @mediapipe/tasks-vision" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "page").exists()
    monkeypatch.setenv("KERAS_VIT_CHROMIUM", "/bin/false")  # executable, and not a browser
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--web-check", "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "KERAS_VIT_CHROMIUM='/bin/false' is not one (point it at chromium or chrome, or unset it)" in capsys.readouterr().err
    monkeypatch.delenv("KERAS_VIT_CHROMIUM")
    monkeypatch.delenv("KERAS_VIT_WEB_MODULES")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--web", str(tmp_path / "page"), "--formats", "onnx", "--output-dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    assert "--web runs a .tflite file: add tflite to --formats" in capsys.readouterr().err


@pytest.mark.parametrize("web, extra, message", [
    ("out", [], "--web must be a folder of its own, apart from --output-dir"),
    ("out/page", ["--overwrite"], "--web must be a folder of its own, apart from --output-dir"),
    (".", ["--overwrite"], "--web must be a folder of its own, apart from --output-dir"),
    ("notes.md", ["--overwrite"], "--web must be a folder, and"),
    ("", [], "--web needs a folder path for the page"),
    ("page", ["--scores", "logits"], "--web shows class probabilities, and the files would output logits: leave out "
                                     "--scores logits"),
])
def test_a_page_folder_that_would_clash_is_refused_before_any_work(trained_vit, tmp_path, monkeypatch, capsys, web,
                                                                   extra, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.md").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        cli.main([trained_vit[1], "--web", web, "--output-dir", "out", *extra])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["notes.md"] and (tmp_path / "notes.md").read_text() == "mine"
