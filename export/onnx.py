"""ONNX export through tf2onnx, checked by the ONNX checker and onnxruntime."""

import weakref

from keras_vit.common import files as _files
from export.onnx_fusion import check_fusion, fuse
from export.modes import ONNX
from export.onnx_quantization import calibration_samples, check_onnx_quantization, quantize
from export.input_range import UNIT, scale
from export.signature import INPUT_NAME, OUTPUT_NAME, PIXELS_INPUT_NAME, prepare
from export.verify import Artifact, check_artifact, verification_images

DEFAULT_OPSET = 17
# docs/traps.md: tf2onnx leaves these when it cannot convert something; onnxruntime then refuses the file.
FORBIDDEN_OPS = ("Erfc", "PartitionedCall", "StatefulPartitionedCall")
# The only op domain allowed: the default ONNX domain ("" and its alias "ai.onnx"). A contrib op such
# as com.microsoft's FusedMatMul passes onnx.checker and loads in onnxruntime, but no other runtime has it.
STANDARD_DOMAINS = ("", "ai.onnx")
# ... except in the "float32_fused" file, made for onnxruntime alone (export.onnx_fusion)
ONNXRUNTIME_DOMAINS = (*STANDARD_DOMAINS, "com.microsoft")
# ServingGraph -> {opset: float32 ONNX bytes}, released with the graph.
_CONVERSIONS = weakref.WeakKeyDictionary()


def export_onnx(model, path, opset=DEFAULT_OPSET, include_preprocessing=False, overwrite=False, verify=True,
                verification_data=None, scores=None, quantization="float32", representative_data=None, input_range=None):
    """Converts `model` to an ONNX file with a dynamic batch, verified before it lands.

    Converted with `tf2onnx.convert.from_function` from the float32 serving
    function (`export.signature.ServingGraph`, the route that works for
    Keras 3 models, docs/traps.md; a model trained under a mixed or
    low-precision dtype policy is exported as its float32 twin). The graph
    has input `images` (in the range the model takes), or `pixels` (raw, in
    [0, 255], with `include_preprocessing`), float32 `(batch, height, width, channels)` (batch
    dynamic; height and width too for a model of any resolution, verified at
    two sizes, `ServingGraph.check_shapes`) and output `predictions` float32 `(batch, classes)`. It must
    pass `onnx.checker.check_model(full_check=True)`, hold only standard ONNX
    ops (no `Erfc` or `PartitionedCall` left-overs), and load in onnxruntime.
    Unless `verify=False`, onnxruntime's outputs are then compared with the
    float32 model (`export.tolerances.TOLERANCES[quantization]`).

    Quantisation modes (onnxruntime's own tools, `export.onnx_quantization`;
    int8 weights, default-domain ops only, so not tied to onnxruntime):
        "float32": no quantisation (file name by convention `model.onnx`).
        "dynamic_int8": `quantize_dynamic`, activations quantised at run
            time per call (`model_dynamic_int8.onnx`).
        "int8": `quantize_static`, QDQ format around the matrix products,
            8-bit activations calibrated (min/max) on `representative_data`
            (`model_int8.onnx`); LayerNorm, Softmax and GELU stay float32.
    And one mode for onnxruntime alone (`export.onnx_fusion`):
        "float32_fused": the float32 file through onnxruntime's transformer
            optimizer (`model_float32_fused.onnx`): float32, held to the
            float32 bar, with `com.microsoft` fused ops (SkipLayerNormalization,
            Gelu) that no other runtime has; needs opset >= 17.
    The float32 ONNX graph is converted once per `ServingGraph` and opset
    and shared by its quantised files.

    Args:
        model: a built keras_vit model (any dtype policy), or an
            `export.signature.ServingGraph`.
        path: `.onnx` file to write (temporary name, then moved).
        opset: ONNX opset, default 17.
        include_preprocessing: bool; True: input raw pixels in [0, 255],
            scaled to the model's range in the graph.
        overwrite: bool, replace an existing `path`.
        verify: bool, default True; False skips the numeric check.
        verification_data: float32 images `(n, h, w, c)` in the range the
            Keras model takes; default a seeded batch of noise.
        scores: None (default: "probabilities", or the graph's own when
            `model` is a `ServingGraph`), "probabilities" (a softmax in the
            graph when the head has no activation) or "logits".
        quantization: "float32" (default), "dynamic_int8", "int8" or
            "float32_fused".
        representative_data: calibration images for "int8", scaled as the
            file's input expects (forms of `export.images.representative_samples`);
            without `verification_data`, the "int8" file is verified on them.
        input_range: None (default: read from the model's first layers,
            `export.input_range.model_input_range`) or the range the model
            takes, one of `export.input_range.RANGES` ("-1,1", "0,1", "0,255").

    Returns:
        `path`.

    Raises:
        ValueError: `opset` is not an int in [13, 18]; an unknown
            `quantization`; "int8" without representative data; a
            Keras-quantised model; "float32_fused" with `opset` < 17 or
            without `sympy` (`export.onnx_fusion.check_fusion`).
        FileExistsError: `path` exists and `overwrite` is False.
        RuntimeError: the converted graph has non-standard ops or
            onnxruntime refuses it, or (float32_fused) no LayerNorm matched
            the rewrite or the optimizer failed; nothing is left at `path`.
        export.verify.VerificationError: outputs NaN/Inf or outside the
            float32 tolerance; nothing is left at `path`.
    """
    check_opset(opset)
    check_onnx_quantization(quantization)
    converter = ONNX[quantization].converter
    if converter == "onnxruntime_transformers":
        check_fusion(opset)
    _files.check_target(path, overwrite)
    graph, owned = prepare(model, include_preprocessing, scores=scores, input_range=input_range)
    check_images = None
    if verification_data is not None:
        check_images = scale(verification_images(verification_data, graph.image_shape, graph.model_range), graph.model_range, UNIT)
    try:
        samples = calibration_samples(quantization, representative_data, graph.image_shape, graph.input_range)
        if check_images is None and samples is not None:  # real images when there are, back in [-1, 1]
            check_images = scale(samples[:64], graph.input_range, UNIT)
        content = _converted(graph, opset, path)
        if converter == "onnxruntime_transformers":
            content = fuse(content)
            check_onnx(content, path, domains=ONNXRUNTIME_DOMAINS)
        elif converter == "onnxruntime":
            content = quantize(content, quantization, samples)
            check_onnx(content, path)
        with _files.staged(path, overwrite) as tmp:
            with open(tmp, "wb") as f:
                f.write(content)
            if verify:
                artifact = Artifact(path, "onnx", tmp, quantization, include_preprocessing, dynamic_size=graph.dynamic_size,
                                    input_range=graph.input_range)
                check_artifact(graph, artifact, check_images)
    finally:
        if owned:
            graph.close()
    return path


def _converted(graph, opset, name):
    """The float32 ONNX bytes of a `ServingGraph`, checked (`check_onnx`); converted by tf2onnx once per graph and opset,
    so that `export_all`'s ONNX modes share one conversion."""
    cache = _CONVERSIONS.setdefault(graph, {})
    if opset not in cache:
        import tf2onnx

        proto, _ = tf2onnx.convert.from_function(graph.function, input_signature=[graph.input_spec], opset=opset)
        rename_output(proto, OUTPUT_NAME)
        content = proto.SerializeToString()
        check_onnx(content, name)
        cache[opset] = content
    return cache[opset]


def check_opset(opset):
    """Raises ValueError unless `opset` is an int in [13, 18], the range tf2onnx 1.17 writes."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not 13 <= opset <= 18:
        raise ValueError(f"`opset` must be an int in [13, 18] (tf2onnx 1.17). Received: opset={opset!r}")


def rename_output(proto, name):
    """Gives the graph's single output a stable name."""
    old = proto.graph.output[0].name
    if old == name:
        return
    for node in proto.graph.node:
        node.output[:] = [name if o == old else o for o in node.output]
        node.input[:] = [name if i == old else i for i in node.input]
    proto.graph.output[0].name = name


def _all_nodes(graph):
    """Every node of an ONNX graph, those in subgraphs (If, Loop, Scan bodies) included."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for sub in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _all_nodes(sub)


def check_onnx(content, name="model", domains=STANDARD_DOMAINS):
    """Raises RuntimeError unless the ONNX bytes hold ops of `domains` only (default: the standard ONNX domain; the
    "float32_fused" file: `ONNXRUNTIME_DOMAINS`), pass the checker and load in onnxruntime."""
    import onnx
    import onnxruntime

    proto = onnx.load_from_string(content)
    bad = sorted({n.op_type for n in proto.graph.node if n.op_type in FORBIDDEN_OPS})
    if bad:
        raise RuntimeError(f"{name}: tf2onnx left unconverted ops {bad}; onnxruntime cannot run them")
    foreign = sorted({f"{n.domain}.{n.op_type}" for n in _all_nodes(proto.graph) if n.domain not in domains})
    if foreign:
        allowed = "only the default ONNX domain is" if domains == STANDARD_DOMAINS else f"only the domains {domains} are"
        raise RuntimeError(f"{name}: non-standard ONNX ops {foreign} ({allowed} allowed)")
    try:
        onnx.checker.check_model(proto, full_check=True)
        onnxruntime.InferenceSession(content, providers=["CPUExecutionProvider"])
    except Exception as e:  # checker or runtime refused the graph
        raise RuntimeError(f"{name}: the ONNX graph is invalid or onnxruntime refuses it: {str(e)[:500]}") from None
    inputs = [i.name for i in proto.graph.input]
    if inputs not in ([INPUT_NAME], [PIXELS_INPUT_NAME]):
        raise RuntimeError(f"{name}: expected one input named {INPUT_NAME!r} or {PIXELS_INPUT_NAME!r}, found {inputs}")
