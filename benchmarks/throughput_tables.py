"""The tables `python -m benchmarks.run` prints: one line per row while it runs, the headline (keras_vit
against its peers), each side's best setting, and the Markdown of benchmarks/README.md. Pure functions of
the rows `benchmarks.run` measures; nothing is timed here."""


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def _one_line(row):
    return (f"  {row['section']:9s} {row['implementation']:38s} {row['model']:5s} {row['precision']:15s} "
            f"xla={row['xla']:3s} batch={row['batch']:2d} {_fmt(row['images_per_s'], '8.2f')} img/s "
            f"{_fmt(row['gflops'], '7.1f')} GFLOP/s")


def headline(rows):
    """keras_vit / best peer for each configuration (same section, model, precision, XLA where it applies, batch)."""
    out = []
    keys = {(r["section"], r["model"], r["precision"], r["xla"], r["batch"]) for r in rows
            if r["implementation"] == "keras_vit"}
    for section, model, precision, xla, batch in sorted(keys):
        ours = next(r for r in rows if r["implementation"] == "keras_vit" and
                    (r["section"], r["model"], r["precision"], r["xla"], r["batch"]) == (section, model, precision, xla, batch))
        peers = [r for r in rows if r["implementation"] != "keras_vit" and r["section"] == section and
                 r["model"] == model and r["precision"] == precision and r["batch"] == batch and
                 r["xla"] in (xla, "n/a") and r["images_per_s"]]
        if not peers or not ours["images_per_s"]:
            continue
        best = max(peers, key=lambda r: r["images_per_s"])
        out.append({"section": section, "model": model, "precision": precision, "xla": xla, "batch": batch,
                    "keras_vit": ours["images_per_s"], "best_peer": best["implementation"],
                    "best_peer_images_per_s": best["images_per_s"], "ratio": ours["images_per_s"] / best["images_per_s"]})
    return out


def best_settings(rows):
    """keras_vit's fastest XLA setting / the fastest peer in any setting, per (section, model, precision, batch).

    What a user who picks the best switch for each library gets; `headline` compares like with like.
    """
    out = []
    keys = {(r["section"], r["model"], r["precision"], r["batch"]) for r in rows if r["implementation"] == "keras_vit"}
    for key in sorted(keys):
        same = [r for r in rows if (r["section"], r["model"], r["precision"], r["batch"]) == key and r["images_per_s"]]
        ours = [r for r in same if r["implementation"] == "keras_vit"]
        peers = [r for r in same if r["implementation"] != "keras_vit"]
        if not ours or not peers:
            continue
        a, b = max(ours, key=lambda r: r["images_per_s"]), max(peers, key=lambda r: r["images_per_s"])
        section, model, precision, batch = key
        out.append({"section": section, "model": model, "precision": precision, "batch": batch,
                    "keras_vit_xla": a["xla"], "keras_vit": a["images_per_s"], "best_peer": b["implementation"],
                    "best_peer_xla": b["xla"], "best_peer_images_per_s": b["images_per_s"],
                    "ratio": a["images_per_s"] / b["images_per_s"]})
    return out


def markdown(result):
    src = result["peak_sources"]
    lines = [f"Machine: {result['machine']}. Matrix-multiply peak measured in this run (best 4096^3 product of "
             f"TensorFlow with and without XLA and PyTorch): float32 {result['peaks']['float32']:.0f} GFLOP/s "
             f"({src['float32']}), bfloat16 {result['peaks']['bfloat16']:.0f} GFLOP/s ({src['bfloat16']}). "
             f"Image {result['image_size']} px, 1000 classes, random weights and inputs; {result['warmup']} warm-up "
             f"and {result['steps']} timed steps per figure.", ""]
    if result["headline"]:
        lines += ["**keras_vit against the best peer** (ratio of images/s; > 1 is faster):", "",
                  "| section | model | precision | XLA | batch | keras_vit img/s | best peer | peer img/s | ratio |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for h in result["headline"]:
            lines.append(f"| {h['section']} | {h['model']} | {h['precision']} | {h['xla']} | {h['batch']} | "
                         f"{h['keras_vit']:.2f} | {h['best_peer']} | {h['best_peer_images_per_s']:.2f} | "
                         f"{h['ratio']:.2f} |")
        lines.append("")
    if result.get("best_settings"):
        lines += ["**Each at its best setting** (keras_vit with XLA on or off, whichever is faster, against the "
                  "fastest peer in any setting):", "",
                  "| section | model | precision | batch | keras_vit img/s (XLA) | best peer (XLA) | peer img/s | ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for h in result["best_settings"]:
            lines.append(f"| {h['section']} | {h['model']} | {h['precision']} | {h['batch']} | "
                         f"{h['keras_vit']:.2f} ({h['keras_vit_xla']}) | {h['best_peer']} ({h['best_peer_xla']}) | "
                         f"{h['best_peer_images_per_s']:.2f} | {h['ratio']:.2f} |")
        lines.append("")
    for section, title in (("train", "Training throughput (`model.fit` on `tf.data`; PyTorch: a plain loop)"),
                           ("infer", "Inference throughput"), ("artifacts", "Exported artifacts (keras_vit)")):
        rows = [r for r in result["rows"] if r["section"] == section]
        if not rows:
            continue
        lines += [f"**{title}**", "",
                  "| implementation | model | precision | XLA | batch | images/s | latency ms | GFLOP/s | of peak | note |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for r in rows:
            latency = r.get("latency_ms") or (None if not r["images_per_s"] else 1000 * r["batch"] / r["images_per_s"])
            lines.append(f"| {r['implementation']} | {r['model']} | {r['precision']} | {r['xla']} | {r['batch']} | "
                         f"{_fmt(r['images_per_s'], '.2f')} | {_fmt(latency, '.1f')} | {_fmt(r['gflops'], '.1f')} | "
                         f"{_fmt(r['fraction_of_peak'], '.1%')} | {r['note']} |")
        lines.append("")
    return "\n".join(lines)
