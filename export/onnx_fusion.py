"""The "float32_fused" ONNX file: keras_vit's float32 file through onnxruntime's transformer optimizer (issue 30).

`model_float32_fused.onnx` computes what `model.onnx` computes, in float32, with onnxruntime's fused transformer
kernels (`onnxruntime.transformers.optimizer.optimize_model`, model type "vit", its fusions only: `opt_level=0`,
`use_gpu=False`). Those kernels are contrib ops of the `com.microsoft` domain (SkipLayerNormalization, Gelu, ...), so
**only onnxruntime runs the file**; `model.onnx` holds default-domain ops only and stays the portable one.

The optimizer matches the node patterns of PyTorch's exporter, and fuses nothing in tf2onnx's graph of a Keras model
as it comes (benchmarks/findings/onnx-fusion-first-look.md). So two rewrites run
first (`rewrite_for_fusion`), each computing the same numbers:
- each LayerNorm subgraph tf2onnx writes (`d = Sub(x, GlobalAveragePool(x))` at opset 17, `ReduceMean` over the last
  axis at opset 18, `Mul(d, d)`, the same mean,
  `Add(epsilon)`, `Sqrt`, `Reciprocal`, `Mul(gamma)`, `Mul(d, ...)`, `Add(beta)`) becomes one ONNX
  `LayerNormalization` node (opset 17, last axis);
- each exact GELU, `Mul(Mul(x, 0.5), Add(1, Erf(Mul(x, 0.7071))))`, is put in the order of onnxruntime's TensorFlow
  GELU pattern, `x * ((1 + erf) * 0.5)`: bit for bit the same, as multiplying by 0.5 is exact.
The optimizer then fuses every residual Add + LayerNorm into SkipLayerNormalization and every GELU into Gelu (a
ViT-Ti/16: 24 SkipLayerNormalization, 12 Gelu, 1 LayerNormalization). It fuses no Attention: Keras'
`MultiHeadAttention` graph (einsums written as MatMul, Reshape and Transpose with the dynamic batch's shape
arithmetic) is not its pattern, and neither is Hugging Face's SDPA graph. `fused_nodes` counts what a file holds; the
export report has it per fused file.

Speed: on an AMD EPYC without AMX (2 cores), ViT-Ti/16, S/16 and B/16 at batch 1 and 8 on 1 and 2 threads, timed in
turn, the fused file ran at 0.88-1.25x `model.onnx`'s speed (level to slower on one thread; `python -m
benchmarks.onnx_fusion`, benchmarks/findings/onnx-fusion.md). Whether it pays depends on the CPU: time it on yours
(`make bench`'s artifact rows).
"""

import collections
import logging
import os

import numpy as np

from keras_vit.common import files as _files
from export.modes import names

# the opset that has ONNX's own LayerNormalization op
MIN_OPSET = 17
FUSED = names("onnx", converter="onnxruntime_transformers")[0]  # the mode this module makes
# the fused op types `fused_nodes` counts, always reported (0 where the optimizer made none)
FUSED_OPS = ("Attention", "MultiHeadAttention", "SkipLayerNormalization", "LayerNormalization", "Gelu", "BiasGelu",
             "FastGelu")
_SQRT_HALF = 0.70710677
# how tf2onnx writes LayerNorm's means: GlobalAveragePool at opset 17, ReduceMean (axes an input) at opset 18
MEANS = ("GlobalAveragePool", "ReduceMean")


def check_fusion(opset):
    """The checks of a "float32_fused" file that need no model, before any work.

    Raises:
        ValueError: `opset` < `MIN_OPSET` (ONNX's LayerNormalization op, which the rewrite writes); or onnxruntime's
            transformer optimizer cannot run here (it needs `sympy`, which onnxruntime does not require): the
            message names the package to install.
    """
    if opset < MIN_OPSET:
        raise ValueError(f"`opset` must be >= {MIN_OPSET} for the {FUSED!r} ONNX file (ONNX's LayerNormalization "
                         f"op). Received: opset={opset}")
    try:
        import sympy  # noqa: F401  (the optimizer's shape inference imports it only when it runs)
        from onnxruntime.transformers import optimizer  # noqa: F401
    except ImportError as e:
        raise ValueError(f"quantization={FUSED!r} is made by onnxruntime's transformer optimizer, which cannot "
                         f"run here ({e}); install `sympy` (`pip install sympy`, or the `export` extra)") from None


def fuse(content):
    """The float32 ONNX bytes of a keras_vit file (tf2onnx, opset >= 17) through `rewrite_for_fusion` and
    onnxruntime's transformer optimizer (model type "vit", `opt_level=0`, `use_gpu=False`).

    Args:
        content: bytes of the float32 ONNX model `export.onnx` converts: one input `images` or `pixels` float32
            `(batch, height, width, channels)`, one output `predictions` float32 `(batch, classes)`.

    Returns:
        The fused file's bytes: the same input and output, `com.microsoft` contrib ops inside.

    Raises:
        RuntimeError: no LayerNorm subgraph matched the rewrite's pattern, or the optimizer failed on the graph (its
            error in the message).
    """
    import onnx
    from onnxruntime.transformers import optimizer

    proto = onnx.load_from_string(content)
    if not rewrite_for_fusion(proto)["LayerNormalization (rewritten)"]:  # the optimizer would fuse GELUs at most
        raise RuntimeError("no LayerNorm of the float32 graph matched the pattern the rewrite knows (tf2onnx's, opset "
                           f"17 or 18): the optimizer would fuse next to nothing, so no {FUSED} file is written")
    with _files.temporary_directory("onnx-fuse-") as work:
        source, target = os.path.join(work, "rewritten.onnx"), os.path.join(work, "fused.onnx")
        onnx.save(proto, source)
        # num_heads=0, hidden_size=0: read from the graph, where the optimizer needs them (its Attention fusion).
        # Its warnings that the file is not PyTorch's and that those are not given say nothing to a user: quiet.
        logger = logging.getLogger("onnxruntime.transformers")
        level = logger.level
        logger.setLevel(logging.ERROR)
        try:
            model = optimizer.optimize_model(source, model_type="vit", num_heads=0, hidden_size=0, opt_level=0,
                                             use_gpu=False)
            model.save_model_to_file(target)
        except Exception as e:  # a pattern the optimizer did not expect: this file fails, the others go on
            raise RuntimeError(f"onnxruntime's transformer optimizer failed on the float32 graph: "
                               f"{type(e).__name__}: {str(e)[:300]}") from e
        finally:
            logger.setLevel(level)
        with open(target, "rb") as f:
            return f.read()


def fused_nodes(path):
    """`{op type: count}` of `FUSED_OPS` in the `.onnx` file at `path` (every key, 0 where none), main graph."""
    import onnx

    counts = collections.Counter(node.op_type for node in onnx.load(path, load_external_data=False).graph.node)
    return {op: counts[op] for op in FUSED_OPS}


def _is(value, number):
    return value is not None and value.size == 1 and abs(float(value) - number) < 1e-6


def rewrite_for_fusion(model):
    """Rewrites `model`, an `onnx.ModelProto` of keras_vit from tf2onnx (opset >= 17), in place: each LayerNorm
    subgraph as one ONNX `LayerNormalization` node, each exact GELU in onnxruntime's pattern order (module docstring).

    A subgraph that differs anywhere from the pattern is left as it is; nodes that no longer feed an output are
    dropped, and initializers no node reads. The numbers do not change (LayerNormalization computes the same
    normalisation in one kernel; the GELU is bit-exact).

    Returns:
        `{"LayerNormalization (rewritten)": count, "GELU (reordered)": count}`.

    Raises:
        onnx.checker.ValidationError: the rewritten graph is not valid ONNX (a bug here, not in the model).
    """
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    constants = {init.name: numpy_helper.to_array(init) for init in graph.initializer}

    def only_consumer(name, op_type):
        found = consumers[name]
        return found[0] if len(found) == 1 and found[0].op_type == op_type else None

    def parent(node, op_type, index=0):
        found = node is not None and len(node.input) > index and producer.get(node.input[index])
        return found if found and found.op_type in ((op_type,) if isinstance(op_type, str) else op_type) else None

    def last_axis_mean(node):
        """A mean over the last axis, keeping it: tf2onnx's GlobalAveragePool (opset 17), or ReduceMean with
        axes [-1] as an attribute or (opset 18) a constant input."""
        if node is None or node.op_type == "GlobalAveragePool":
            return node
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        axes = attributes.get("axes", constants.get(node.input[1]) if len(node.input) > 1 else None)
        return node if attributes.get("keepdims", 1) == 1 and axes is not None and list(axes) == [-1] else None

    replaced = {}
    for sqrt in (node for node in graph.node if node.op_type == "Sqrt"):
        add_eps = parent(sqrt, "Add")
        square = parent(last_axis_mean(parent(add_eps, MEANS)), "Mul")
        sub = parent(square, "Sub")
        mean = last_axis_mean(parent(sub, MEANS, 1))
        if not (mean and add_eps.input[1] in constants and square.input[0] == square.input[1]
                and mean.input[0] == sub.input[0]):
            continue
        reciprocal = only_consumer(sqrt.output[0], "Reciprocal")
        scale = reciprocal and only_consumer(reciprocal.output[0], "Mul")
        gamma = scale and next(name for name in scale.input if name != reciprocal.output[0])
        normed = scale and only_consumer(scale.output[0], "Mul")
        if not (normed and sub.output[0] in normed.input and constants.get(gamma, np.zeros(0)).ndim == 1):
            continue
        inputs, out = [sub.input[0], gamma], normed.output[0]
        bias = only_consumer(out, "Add")
        beta = bias and next(name for name in bias.input if name != out)
        if bias and constants.get(beta, np.zeros(0)).ndim == 1:
            inputs, out = inputs + [beta], bias.output[0]
        else:  # an all-zero beta, whose Add tf2onnx drops: a zero beta all the same (the optimizer's SkipLayerNorm
            # fusion reads a third input)
            zeros = f"{sqrt.name}/zero_beta"
            graph.initializer.append(numpy_helper.from_array(np.zeros_like(constants[gamma]), zeros))
            inputs.append(zeros)
        epsilon = float(constants[add_eps.input[1]])
        replaced[out] = [helper.make_node("LayerNormalization", inputs, [out], axis=-1, epsilon=epsilon,
                                          name=f"{sqrt.name}/LayerNormalization")]
    layer_norms, gelus = len(replaced), 0
    for erf in [node for node in graph.node if node.op_type == "Erf"]:
        scaled = parent(erf, "Mul")
        one = only_consumer(erf.output[0], "Add")
        product = one and only_consumer(one.output[0], "Mul")
        half = product and next((producer.get(name) for name in product.input if name != one.output[0]), None)
        if not (scaled and half and half.op_type == "Mul" and len(consumers[half.output[0]]) == 1):
            continue
        x = next((name for name in scaled.input if name not in constants), None)
        halves = [name for name in half.input if name in constants and _is(constants[name], 0.5)]
        if not (halves and x in half.input and any(_is(constants.get(n), _SQRT_HALF) for n in scaled.input)
                and any(_is(constants.get(n), 1.0) for n in one.input)):
            continue
        halved = f"{erf.name}/half"
        replaced[product.output[0]] = [helper.make_node("Mul", [one.output[0], halves[0]], [halved], name=halved),
                                       helper.make_node("Mul", [x, halved], [product.output[0]],
                                                        name=f"{erf.name}/gelu")]
        gelus += 1
    nodes = [new for node in graph.node for new in replaced.get(node.output[0], [node])]
    needed, live = {out.name for out in graph.output}, []
    for node in reversed(nodes):  # dead-code elimination, outputs first
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(node.input)
    del graph.node[:]
    graph.node.extend(reversed(live))
    used = {name for node in live for name in node.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    return {"LayerNormalization (rewritten)": layer_norms, "GELU (reordered)": gelus}
