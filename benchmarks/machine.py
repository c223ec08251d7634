"""The machine a benchmark ran on, in words: CPU model, its matrix units (VNNI, AMX), cores, library versions.

Rankings depend on the CPU (docs/traps.md, "Measuring"): every table names it.
"""

import os


def cpu(cpuinfo="/proc/cpuinfo"):
    """The CPU in words, e.g. "AMD EPYC (AVX-512 VNNI, no AMX)": its model name and the integer / bfloat16 matrix
    units its kernels can use (the edge table's int8 ratios differ between CPUs with and without them); "unknown
    CPU" where `cpuinfo` cannot be read (not Linux)."""
    try:
        with open(cpuinfo) as f:
            text = f.read()
    except OSError:
        return "unknown CPU"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")),
                "unknown CPU")
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    units = ["AVX-512 VNNI" if "avx512_vnni" in flags else "AVX-VNNI" if "avx_vnni" in flags else "no VNNI",
             "AMX" if "amx_int8" in flags or "amx_bf16" in flags else "no AMX"]
    return f"{name} ({', '.join(units)})"


def machine():
    """The machine line of a result: architecture, CPU model and matrix units, CPU count and the versions of
    TensorFlow, LiteRT, onnxruntime."""
    import platform

    import ai_edge_litert
    import onnxruntime
    import tensorflow as tf

    litert = getattr(ai_edge_litert, "__version__", "?")
    return (f"{platform.machine()}, {cpu()}, {os.cpu_count()} CPU cores, TensorFlow {tf.__version__}, "
            f"LiteRT {litert}, onnxruntime {onnxruntime.__version__}")
