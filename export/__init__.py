"""export: SavedModel, TFLite and ONNX artifacts of keras_vit models, verified in their own runtimes.

Heavy runtimes (tf2onnx, onnxruntime, LiteRT, tflite-support) are imported
inside the functions that need them. `keras_vit` never imports this package.

Keras backend: the export graphs are TensorFlow's, so this package runs on
Keras' TensorFlow backend; a `.keras` file saved on any backend (JAX,
PyTorch) exports. Imported before Keras, it selects the TensorFlow backend
for the process (`keras-vit-export` always is; a KERAS_BACKEND set to
another backend is named on stderr). Imported after Keras started on another
backend, it raises ImportError saying so.

The files, in the order an export runs:
    signature.py      the one float32 serving graph every format converts (sizes.py: image sizes;
                      scores.py: what it outputs)
    input_range.py    the range a model takes, read from its first layers
    images.py         calibration and verification images
    saved_model.py, tflite.py (litert_quantization.py: LiteRT Quantizer's modes; reparameterize.py: the
                      exact LayerNorm rewrite before int8_mixed16; int8_graph.py), onnx.py, onnx_quantization.py,
                      onnx_fusion.py (the float32_fused file: onnxruntime's transformer optimizer)
    metadata.py       class names and input description inside each .tflite
    verify.py         each file against Keras (runtimes.py: each file run in its runtime; tolerances.py: the
                      figures and the bars; fast_path.py: where it runs fast; mediapipe_check.py: MediaPipe
                      Tasks' ImageClassifier; web_check.py: MediaPipe Tasks for Web and onnxruntime-web in
                      headless Chromium, driving web/runner.html)
    contract.py       what an app feeds each file and gets back
    profile.py, onnx_profile.py   op profiles
    pipeline.py       export_all; __main__.py and _cli_text.py: keras-vit-export; web_page.py: the --web page
                      (web/page/)
Files are staged and moved into place by keras_vit/common/files.py.
"""

import importlib.util as _importlib_util
import os as _os
import sys as _sys

if _importlib_util.find_spec("tensorflow") is None:  # looked up, not imported: its start-up stays quiet (_console)
    _message = ("The export package (SavedModel, TFLite, ONNX) needs TensorFlow, which is not installed here. "
                "Install it with: pip install -e '.[export]' in the keras_vit checkout (or '.[tensorflow]'); a "
                ".keras file saved on any Keras backend exports.")
    if _os.path.basename(_sys.argv[0]) in ("keras-vit-export", "-m"):  # the command line: one line, exit 2
        print(f"keras-vit-export: error: {_message}", file=_sys.stderr)
        raise SystemExit(2)
    raise ImportError(_message)

if "keras" not in _sys.modules:
    if _os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        print(f"export: KERAS_BACKEND={_os.environ['KERAS_BACKEND']} set aside: export runs on Keras' TensorFlow "
              "backend (the .keras file may come from any backend)", file=_sys.stderr)
    _os.environ["KERAS_BACKEND"] = "tensorflow"
else:
    import keras as _keras

    if _keras.backend.backend() != "tensorflow":
        raise ImportError(
            f"The export package runs on Keras' TensorFlow backend, and Keras already runs on "
            f"{_keras.backend.backend()!r} in this process. Export in a process with KERAS_BACKEND=tensorflow "
            "(keras-vit-export does so itself); a .keras file saved on any backend exports."
        )

from export.onnx import export_onnx  # noqa: E402
from export.pipeline import export_all  # noqa: E402
from export.saved_model import export_saved_model  # noqa: E402
from export.tflite import export_tflite  # noqa: E402
from export.verify import verify  # noqa: E402

__all__ = ["export_saved_model", "export_tflite", "export_onnx", "verify", "export_all"]
