"""Issue 43, item 2: verification opens the held-out files of an image folder as MediaPipe does (export.app_files).

A folder of digit scans saved as a phone saves portrait photos: the pixels stored sideways with an EXIF
Orientation tag. As JPEG, MediaPipe 1.2.3 applies the tag as keras_vit.data does: the export passes, and each
.tflite file's agreement with Keras on the files themselves is reported. As PNG, MediaPipe shows the stored
pixels: the app would classify another picture than the one verified, and the export fails, naming the file.
"""

import json

import numpy as np
import pytest
from PIL import Image

from export.app_files import held_out_files
from export.images import load_data
from export.pipeline import export_all
from export.verify import VerificationError
from keras_vit import data

pytest.importorskip("mediapipe")
pytestmark = pytest.mark.export

TURN = {6: 1, 8: 3, 3: 2, 1: 0}  # np.rot90 turns (counter-clockwise) that the tag turns back


def _portrait_folder(root, ext, count=60):
    """Held-out-digit scans (16 px, RGB) stored turned, each with the Orientation tag that turns it upright."""
    images, labels = next(iter(data.digits("validation", image_size=16, batch_size=count)))
    pixels = np.clip(np.rint((images.numpy() + 1) * 127.5), 0, 255).astype("uint8")
    for i, (picture, label) in enumerate(zip(pixels, labels.numpy())):
        value = (6, 8, 3, 1)[i % 4]
        tags = Image.Exif()
        tags[0x0112] = value
        folder = root / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        stored = np.ascontiguousarray(np.rot90(picture, TURN[value]))
        Image.fromarray(stored).save(folder / f"{i}.{ext}", exif=tags.tobytes(), **({"quality": 95} if ext == "jpg" else {}))
    return root


def _held_out_count(folder):
    """The stratified split's held-out count: round(0.2 n) of each class's n files (keras_vit.data.image_folder)."""
    return sum(round(0.2 * len(list(d.iterdir()))) for d in folder.iterdir())


def test_held_out_files_are_the_verification_images_in_order(tmp_path, trained_vit):
    folder = _portrait_folder(tmp_path / "photos", "jpg")
    _, images, _, _ = load_data(str(folder), trained_vit[0])
    files = held_out_files(str(folder), len(images))
    assert len(files) == len(images) == _held_out_count(folder) == 11  # 20% of each class of the 60
    for file, image in zip(files, images):
        upright = data.read_image(file)  # the file, as keras_vit.data decodes it: 16 px, no resize
        np.testing.assert_allclose(upright / 127.5 - 1, image, atol=1e-5)
    assert held_out_files("digits", 10) is None and held_out_files(images, 10) is None


def test_portrait_jpegs_pass_and_the_files_agreement_is_reported(tmp_path, trained_vit):
    folder = _portrait_folder(tmp_path / "photos", "jpg")
    out = tmp_path / "export"
    export_all(trained_vit[0], str(out), formats="tflite", quantizations="float32", calibration_data=str(folder),
               measure_latency=False)
    report = json.loads((out / "report.json").read_text())
    assert report["app_files"]["files"] == _held_out_count(folder)
    assert report["app_files"]["seen_differently"] == [] and report["app_files"]["not_opened"] == []
    (row,) = report["artifacts"]
    assert row["passed"] and row["mediapipe_files_top1_agreement"] >= 0.9  # MediaPipe resizes nothing at 16 px


def test_portrait_pngs_fail_naming_the_file_mediapipe_sees_sideways(tmp_path, trained_vit):
    folder = _portrait_folder(tmp_path / "photos", "png")
    count = _held_out_count(folder)
    held_out = held_out_files(str(folder), count)
    turned = [f for f in held_out if int(f.rsplit("/", 1)[1].split(".")[0]) % 4 != 3]  # every 4th has tag 1
    assert 0 < len(turned) < count
    out = tmp_path / "export"
    with pytest.raises(VerificationError, match=rf"MediaPipe opens {len(turned)} of the {count} verification files as "
                                                r"another picture.*\.png: .*EXIF orientation"):
        export_all(trained_vit[0], str(out), formats="tflite", quantizations="float32", calibration_data=str(folder),
                   measure_latency=False)
    report = json.loads((out / "report.json").read_text())
    seen = report["app_files"]["seen_differently"]
    assert sorted(s["file"] for s in seen) == sorted(turned)  # the files of tag 1 read the same
    assert not (out / "model_float32.tflite").exists()  # a failed file is not left where an app would take it
