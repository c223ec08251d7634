"""The tables `python -m benchmarks.run` prints: one line per row while it runs, the headline (keras_vit
against its peers), each side's best setting, and the Markdown of benchmarks/README.md. Pure functions of
the rows `benchmarks.run` measures; nothing is timed here."""


def _fmt(v, spec):
    return "–" if v is None else format(v, spec)


def one_line(row):
    return (f"  {row['section']:9s} {row['implementation']:38s} {row['model']:5s} {row['precision']:15s} "
            f"xla={row['xla']:3s} batch={row['batch']:2d} {_fmt(row['images_per_s'], '8.2f')} img/s "
            f"{_fmt(row['gflops'], '7.1f')} GFLOP/s")


def ours(row):
    """Whether `row` is keras_vit's, on any Keras backend ("keras_vit" is TensorFlow's, "keras_vit (JAX)" ...)."""
    return row["implementation"].startswith("keras_vit")


def setting(row):
    """A keras_vit row's setting in words: "TF, XLA on", "JAX", "PyTorch backend"."""
    if row["implementation"] == "keras_vit":
        return f"TF, XLA {row['xla']}"
    return row["implementation"].split("(", 1)[1].rstrip(")")


def headline(rows):
    """keras_vit on TensorFlow / best peer for each configuration (same section, model, precision, XLA where it
    applies, batch); keras_vit on the other backends is not a peer."""
    out = []
    keys = {(r["section"], r["model"], r["precision"], r["xla"], r["batch"]) for r in rows
            if r["implementation"] == "keras_vit"}
    for section, model, precision, xla, batch in sorted(keys):
        mine = next(r for r in rows if r["implementation"] == "keras_vit" and
                    (r["section"], r["model"], r["precision"], r["xla"], r["batch"]) == (section, model, precision, xla, batch))
        peers = [r for r in rows if not ours(r) and r["section"] == section and
                 r["model"] == model and r["precision"] == precision and r["batch"] == batch and
                 r["xla"] in (xla, "n/a") and r["images_per_s"]]
        if not peers or not mine["images_per_s"]:
            continue
        best = max(peers, key=lambda r: r["images_per_s"])
        out.append({"section": section, "model": model, "precision": precision, "xla": xla, "batch": batch,
                    "keras_vit": mine["images_per_s"], "best_peer": best["implementation"],
                    "best_peer_images_per_s": best["images_per_s"], "ratio": mine["images_per_s"] / best["images_per_s"]})
    return out


def best_settings(rows):
    """keras_vit's fastest setting (backend, XLA) / the fastest peer in any setting, per (section, model, precision,
    batch).

    What a user who picks the best switch for each library gets; `headline` compares like with like.
    """
    out = []
    keys = {(r["section"], r["model"], r["precision"], r["batch"]) for r in rows if ours(r)}
    for key in sorted(keys):
        same = [r for r in rows if (r["section"], r["model"], r["precision"], r["batch"]) == key and r["images_per_s"]]
        mine = [r for r in same if ours(r)]
        peers = [r for r in same if not ours(r)]
        if not mine or not peers:
            continue
        a, b = max(mine, key=lambda r: r["images_per_s"]), max(peers, key=lambda r: r["images_per_s"])
        section, model, precision, batch = key
        out.append({"section": section, "model": model, "precision": precision, "batch": batch,
                    "keras_vit_xla": a["xla"], "keras_vit_setting": setting(a), "keras_vit": a["images_per_s"],
                    "best_peer": b["implementation"],
                    "best_peer_xla": b["xla"], "best_peer_images_per_s": b["images_per_s"],
                    "ratio": a["images_per_s"] / b["images_per_s"]})
    return out


FLOAT32_FILES = ("SavedModel", "TFLite float32", "ONNX Runtime")
# benchmarks.run's PyTorch peers: job name -> row name
TORCH_PEERS = {"torch": "HF transformers (PyTorch)", "torch_compile": "HF transformers (torch.compile)"}


def files_against_torch(rows):
    """The fastest float32 exported file / the fastest PyTorch peer (eager or `torch.compile`), per (model, batch):
    issue 30, item 4's bar (at least 1.3x at batch 1 for Ti/16 and S/16)."""
    out = []
    for model, batch in sorted({(r["model"], r["batch"]) for r in rows if r["section"] == "artifacts"}):
        files = [r for r in rows if r["section"] == "artifacts" and (r["model"], r["batch"]) == (model, batch) and
                 r["implementation"].startswith(FLOAT32_FILES) and r["images_per_s"]]
        torch = [r for r in rows if r["section"] == "infer" and (r["model"], r["batch"]) == (model, batch) and
                 r["implementation"] in TORCH_PEERS.values() and r["images_per_s"]]
        if not files or not torch:
            continue
        a, b = max(files, key=lambda r: r["images_per_s"]), max(torch, key=lambda r: r["images_per_s"])
        out.append({"model": model, "batch": batch, "file": a["implementation"], "file_images_per_s": a["images_per_s"],
                    "torch": b["implementation"], "torch_images_per_s": b["images_per_s"],
                    "ratio": a["images_per_s"] / b["images_per_s"]})
    return out


def markdown(result):
    src = result["peak_sources"]
    n = result.get("peak_size", 4096)
    lines = [f"Machine: {result['machine']}. Matrix-multiply peak measured in this run (best {n}^3 product of "
             f"TensorFlow with and without XLA and PyTorch): float32 {result['peaks']['float32']:.0f} GFLOP/s "
             f"({src['float32']}), bfloat16 {result['peaks']['bfloat16']:.0f} GFLOP/s ({src['bfloat16']}); each "
             f"row's \"of peak\" divides by the peak measured again in the row's own process. "
             f"Image {result['image_size']} px, 1000 classes, random weights and inputs; {result['warmup']} warm-up "
             f"and {result['steps']} timed steps per figure.", ""]
    summaries = (
        ("headline", "**keras_vit against the best peer** (ratio of images/s; > 1 is faster):",
         "section | model | precision | XLA | batch | keras_vit img/s | best peer | peer img/s | ratio",
         lambda h: [h["section"], h["model"], h["precision"], h["xla"], h["batch"], f"{h['keras_vit']:.2f}",
                    h["best_peer"], f"{h['best_peer_images_per_s']:.2f}", f"{h['ratio']:.2f}"]),
        ("best_settings", "**Each at its best setting** (keras_vit on the fastest of its backends and XLA settings, "
         "against the fastest peer in any setting):",
         "section | model | precision | batch | keras_vit img/s (setting) | best peer (XLA) | peer img/s | ratio",
         lambda h: [h["section"], h["model"], h["precision"], h["batch"],
                    f"{h['keras_vit']:.2f} ({h['keras_vit_setting']})", f"{h['best_peer']} ({h['best_peer_xla']})",
                    f"{h['best_peer_images_per_s']:.2f}", f"{h['ratio']:.2f}"]),
        ("files_against_torch", "**The fastest exported float32 file against the fastest PyTorch peer** (ratio of "
         "images/s; > 1 is faster):",
         "model | batch | fastest float32 file | file img/s | fastest PyTorch peer | peer img/s | ratio",
         lambda h: [h["model"], h["batch"], h["file"], f"{h['file_images_per_s']:.2f}", h["torch"],
                    f"{h['torch_images_per_s']:.2f}", f"{h['ratio']:.2f}"]),
    )
    for key, title, header, cells in summaries:
        if result.get(key):
            lines += [title, "", f"| {header} |", "|" + "---|" * (header.count("|") + 1)]
            lines += ["| " + " | ".join(str(c) for c in cells(h)) + " |" for h in result[key]]
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
