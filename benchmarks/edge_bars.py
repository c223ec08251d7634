"""The edge table's bars: issue 11's on ViT-Ti/16 and issue 27's on both trained judges, met or not, with the figure.

Split out of `benchmarks/edge.py` (which re-exports both names). Nothing here measures; each bar reads the rows of
`benchmarks.edge.run` (1 thread, same run) and says whether the figure meets it.
"""

from benchmarks.edge_models import MODELS, QUICK_MODEL


def bars(rows, model="Ti16"):
    """Issue 11's bars on `model` (1 thread, same run): a list of {"bar", "figure", "met"} (met None: not measured)."""
    by = {(r["format"], r["mode"]): r for r in rows if r["model"] == model}
    out = []

    def bar(text, key, figure, test):
        row = by.get(key)
        if row is None:
            out.append({"bar": text, "figure": f"{key[0]} {key[1]} not in this run", "met": None})
        else:
            value, shown = figure(row)
            out.append({"bar": text, "figure": shown, "met": bool(test(row, value))})

    bar("full-integer int8 <= 0.6x float32 latency, integer-only", ("tflite", "int8"),
        lambda r: (r["ratio_1"], f"{r['ratio_1']:.2f}x, {r['float_ops']} float ops"),
        lambda r, v: v <= 0.6 and r["float_ops"] == 0)
    bar("dynamic_int8 <= 0.55x float32 latency", ("tflite", "dynamic_int8"),
        lambda r: (r["ratio_1"], f"{r['ratio_1']:.2f}x"), lambda r, v: v <= 0.55)
    bar("int16x8 top-1 agreement >= 99%", ("tflite", "int16x8"),
        lambda r: (r["decisive_top1_agreement"], f"{r['decisive_top1_agreement']:.1%}"), lambda r, v: v >= 0.99)
    bar("weight_only_int4 size <= 0.2x float32, agreement >= 97%", ("tflite", "weight_only_int4"),
        lambda r: (r["size_ratio"], f"{r['size_ratio']:.3f}x, {r['decisive_top1_agreement']:.1%}"),
        lambda r, v: v <= 0.2 and r["decisive_top1_agreement"] >= 0.97)
    slow = [f"{r['format']} {r['mode']} {r['speedup']:.2f}x" for r in by.values() if r["speedup"] < 1.5]
    if by:
        low = min(by.values(), key=lambda r: r["speedup"])
        out.append({"bar": "every mode: 2 threads >= 1.5x faster than 1 thread",
                    "figure": ("below: " + ", ".join(slow)) if slow else f"lowest {low['speedup']:.2f}x",
                    "met": not slow})
    has_s = any(r["model"] == "S16" for r in rows)
    out.append({"bar": "ViT-S/16 in the same table", "figure": "present" if has_s else "not in this run",
                "met": has_s if any(r["model"] != QUICK_MODEL for r in rows) else None})
    return out


def judge_bars(rows, models=tuple(MODELS)):
    """Issue 27's bars on each trained judge (1 thread, same run): a list of {"bar", "figure", "met"}; a model or
    mode not in the run, or a random-weight run, gives met None. Accuracy drop: Keras' accuracy on the same inputs
    minus the file's, in points (negative: the file is more accurate)."""
    out = []
    for model in models:
        by = {(r["format"], r["mode"]): r for r in rows if r["model"] == model}
        judge = next((r.get("judge_accuracy") for r in by.values() if r.get("judge_accuracy") is not None), None)
        out.append({"bar": f"{model} judge >= 95% held-out accuracy (360 digits)",
                    "figure": "not in this run" if judge is None else f"{judge:.1%}",
                    "met": None if judge is None else judge >= 0.95})
        for fmt, mode, latency in (("tflite", "int8", True), ("tflite", "int8_mixed16", True), ("onnx", "int8", False)):
            row = by.get((fmt, mode))
            text = (f"{model} {fmt} {mode}: agreement >= 99%"
                    + (", accuracy drop <= 1 point, <= 0.4x float32 latency, integer-only" if latency else ""))
            if row is None or row.get("accuracy") is None or row.get("keras_accuracy") is None:
                out.append({"bar": text, "figure": "not in this run", "met": None})
                continue
            drop = 100 * (row["keras_accuracy"] - row["accuracy"])
            figure = f"{row['decisive_top1_agreement']:.1%}"
            met = row["decisive_top1_agreement"] >= 0.99
            if latency:
                figure += f", drop {drop:+.1f} points, {row['ratio_1']:.2f}x, {row['float_ops']} float ops"
                met = met and drop <= 1.0 and row["ratio_1"] <= 0.4 and row["float_ops"] == 0
            out.append({"bar": text, "figure": figure, "met": bool(met)})
    return out
