"""export: SavedModel, TFLite and ONNX artifacts of keras_vit models, verified in their own runtimes.

Heavy runtimes (tf2onnx, onnxruntime, LiteRT, tflite-support) are imported
inside the functions that need them. `keras_vit` never imports this package.
"""

from export.onnx import export_onnx
from export.pipeline import export_all
from export.saved_model import export_saved_model
from export.tflite import export_tflite
from export.verify import verify

__all__ = ["export_saved_model", "export_tflite", "export_onnx", "verify", "export_all"]
