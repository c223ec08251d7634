"""keras_vit: the Vision Transformer (arXiv:2010.11929) for Keras 3."""

from keras_vit.common import console as _console

_console.quiet_start()  # before TensorFlow loads; a no-op unless this process is a keras-vit-* command line

from keras_vit import layers  # noqa: E402
from keras_vit.common import backend as _backend  # noqa: E402
from keras_vit.models import (
    VisionTransformer,
    ViTB8,
    ViTB16,
    ViTB32,
    ViTH14,
    ViTL16,
    ViTL32,
    ViTS16,
    ViTS32,
    ViTTi16,
    ViTR26S32,
    ViTR50B16,
    ViTR50L32,
)
from keras_vit.preprocessing import decode_predictions, preprocess_input
from keras_vit import weights  # noqa: E402 (after models: it builds them lazily)
from keras_vit import training  # noqa: E402, F401 (registers its optimizers, so saved models load after `import keras_vit`)
# Registers MaskedPatchPrediction for the same reason. Pre-training's data side needs TensorFlow, which the JAX
# and PyTorch backends may run without: there `from keras_vit import pretraining` registers it.
if _backend.backend() == "tensorflow":
    from keras_vit import pretraining  # noqa: E402, F401
from keras_vit.resize import resize  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "layers",
    "VisionTransformer",
    "ViTTi16",
    "ViTS16",
    "ViTS32",
    "ViTB8",
    "ViTB16",
    "ViTB32",
    "ViTL16",
    "ViTL32",
    "ViTH14",
    "ViTR26S32",
    "ViTR50B16",
    "ViTR50L32",
    "preprocess_input",
    "decode_predictions",
    "weights",
    "resize",
]
