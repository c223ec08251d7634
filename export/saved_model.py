"""SavedModel export with a stable serving signature."""

import shutil

from keras_vit.common import files as _files
from export.input_range import UNIT, scale
from export.signature import prepare
from export.verify import Artifact, check_artifact, verification_images


def export_saved_model(model, path, include_preprocessing=False, overwrite=False, verify=True, verification_data=None,
                       scores=None, input_range=None):
    """Writes `model` as a TensorFlow SavedModel folder at `path`, verified before it lands.

    Built with Keras' own `keras.export.ExportArchive` (docs/traps.md: wrapping a
    Keras 3 model in a `tf.Module` loses its weights in later conversions)
    from the model's float32 serving graph (`export.signature.ServingGraph`:
    a model trained under a mixed or low-precision dtype policy is exported
    as its float32 twin). The `serving_default` (and `serve`) signature takes
    `images` (in the range the model takes), or `pixels` (raw, in [0, 255],
    with `include_preprocessing`), float32 `(batch, height, width, channels)` with a dynamic
    batch (and, for a model of any resolution, a dynamic height and width:
    verified at two sizes, `ServingGraph.check_shapes`), and returns
    `{"predictions": float32 (batch, classes)}`. Reload
    with `tf.saved_model.load(path).signatures["serving_default"]` or
    `keras.layers.TFSMLayer(path, call_endpoint="serving_default")`.

    Args:
        model: a built keras_vit model (any Keras model with one image
            input, any dtype policy), or an `export.signature.ServingGraph`.
        path: folder to write; written as a temporary folder beside it and
            renamed into place.
        include_preprocessing: bool, default False. True: the input, named
            `pixels`, takes raw pixels in [0, 255], and their scaling to the
            model's range (x / 127.5 - 1 for [-1, 1]) runs inside the graph;
            False: `images` are in the range the model takes.
        overwrite: bool, default False. Replace an existing `path`.
        verify: bool, default True: run the SavedModel in TensorFlow against
            the float32 model (`export.tolerances.TOLERANCES["float32"]`) before
            moving it into place; False skips it.
        verification_data: float32 images `(n, h, w, c)` in the range the
            Keras model takes, to verify on; default a seeded batch of noise.
        scores: None (default: "probabilities", or the graph's own when
            `model` is a `ServingGraph`), "probabilities" (a softmax in the
            graph when the head has no activation) or "logits".
        input_range: None (default: read from the model's first layers,
            `export.input_range.model_input_range`) or the range the model
            takes, one of `export.input_range.RANGES` ("-1,1", "0,1", "0,255").

    Returns:
        `path`.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: the model has no single image input of known channels,
            or is Keras-quantised.
        export.verify.VerificationError: the outputs are NaN/Inf or outside
            the float32 tolerance; nothing is left at `path`.
    """
    _files.check_target(path, overwrite)
    graph, owned = prepare(model, include_preprocessing, scores=scores, input_range=input_range)
    check_images = None
    if verification_data is not None:
        check_images = scale(verification_images(verification_data, graph.image_shape, graph.model_range), graph.model_range, UNIT)
    try:
        with _files.staged(path, overwrite, directory=True) as tmp:
            shutil.copytree(graph.saved_model_dir(), tmp)
            if verify:
                artifact = Artifact(path, "saved_model", tmp, "float32", include_preprocessing,
                                    dynamic_size=graph.dynamic_size, input_range=graph.input_range)
                check_artifact(graph, artifact, check_images)
    finally:
        if owned:
            graph.close()
    return path


__all__ = ["export_saved_model", "INPUT_NAME", "OUTPUT_NAME"]
