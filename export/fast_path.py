"""Where each artifact runs fast: XNNPACK on a phone's CPU, reference kernels only, or an NPU.

A `.tflite` file runs wherever LiteRT runs, but not at the same speed
everywhere. LiteRT hands the ops its XNNPACK delegate takes to XNNPACK's
SIMD kernels (the CPU's fast path) and leaves the rest to its builtin
reference kernels, which are many times slower. Two modes cannot be fast on
a CPU at all (measured on ViT-Ti/16 and ViT-S/16 at 224 px, LiteRT 2.3,
benchmarks/findings/edge-table-int8.md):

- int16x8: XNNPACK has no int16 kernels, so every op runs on LiteRT's
  reference kernels: 29-31x float32's latency. It is made for NPUs and DSPs
  with int16 activations.
- weight_only_int4: LiteRT dequantises the int4 weights with builtin
  kernels outside XNNPACK before each matrix product (149 of 536 ops off
  XNNPACK, 51 partitions): about 4x float32's latency. `dynamic_int4` keeps
  the same int4 weights inside XNNPACK's matrix products and is fast.

The integer-only modes (full_integer_int8 with int8 activations, and
int8_mixed16 with int16 where a ViT needs them) are the ones an
integer-only accelerator (Edge TPU, NNAPI or QNN DSPs, MCU NPUs) can run
whole. The phone-CPU file is int8: int8 matrix products and float32
LayerNorms, softmax and GELU, all inside XNNPACK (issue 45). The export report's `runs_fast_on` and the table's column come from
`FAST_PATH`; the op profile (`--profile`, `export.profile.tflite_profile`)
measures which ops XNNPACK takes in the file itself.
"""

from export.modes import FLOAT32, FORMATS, XNNPACK

# what the labels claim, in the op profile's terms: XNNPACK runs every matrix product (FULLY_CONNECTED, BATCH_MATMUL)
# of a file labelled XNNPACK or "(matrix products on XNNPACK)", and no FULLY_CONNECTED of one on reference kernels only
# or "for its matrix products"
MATRIX_PRODUCTS = ("FULLY_CONNECTED", "BATCH_MATMUL")
# (format, quantization) -> (where it runs fast, why, in one clause): the SavedModel, and each mode's record
FAST_PATH = {("saved_model", FLOAT32): ("TensorFlow (server)", "a TensorFlow graph")}
FAST_PATH.update({(fmt, mode.name): (mode.runs_fast_on, mode.why) for fmt, table in FORMATS.items()
                  for mode in table.values()})


def fast_path(fmt, quantization):
    """Where a file of `fmt` ("saved_model", "tflite", "onnx") and `quantization` runs fast, as a short text.

    Returns:
        str, e.g. "XNNPACK (CPU)" or "reference kernels only (slow on a CPU)"; "unknown" for a pair not in
        `FAST_PATH`.
    """
    return FAST_PATH.get((fmt, quantization), ("unknown", ""))[0]


def matrix_products_on_xnnpack(profile, ops=MATRIX_PRODUCTS):
    """`(on XNNPACK, all)`: the matrix products (`ops`) of a `.tflite` file that XNNPACK runs, from its op profile
    (`export.profile.tflite_profile`'s "ops" rows). What `FAST_PATH`'s labels claim: all of them for an XNNPACK
    file; no FULLY_CONNECTED (the products with weights) for one on reference kernels."""
    rows = [row for row in profile["ops"] if row["op"] in ops]
    return sum(row["xnnpack"] for row in rows), sum(row["count"] for row in rows)


def slow_on_cpu(modes):
    """One line for the TFLite `modes` asked for that cannot be fast on a phone's CPU, or "" when none is.

    Args:
        modes: TFLite quantization names (e.g. `export.tflite.QUANTIZATIONS`' entries).

    Returns:
        str, e.g. "note: int16x8 is slow on a CPU (int16x8: XNNPACK has no int16 kernels, ...); for a phone's CPU
        pick int8, dynamic_int8 or dynamic_int4".
    """
    slow = [m for m in modes if m in FORMATS["tflite"] and FORMATS["tflite"][m].slow_on_cpu]
    if not slow:
        return ""
    reasons = "; ".join(f"{m}: {FAST_PATH[('tflite', m)][1]}" for m in slow)
    fast = [m.name for m in sorted(FORMATS["tflite"].values(), key=lambda m: not m.calibrated)  # full-integer first
            if m.runs_fast_on.startswith(XNNPACK) and m.weights in ("int8", "int4") and m.activations != FLOAT32]
    return (f"note: {', '.join(slow)} {'is' if len(slow) == 1 else 'are'} slow on a CPU ({reasons}); for a phone's "
            f"CPU pick {', '.join(fast[:-1])} or {fast[-1]}")
