"""Merging edge-table runs: the rows of models measured in an earlier run of the same settings on the same machine."""

from benchmarks.edge_bars import bars, judge_bars
from benchmarks.edge_models import MODELS


def check_merge(earlier, settings):
    """Raises ValueError (naming what differs) unless `earlier` is a `run` result of the same `settings`.

    `settings`: {"machine", "weights", "samples", "rounds", "runs"} of this run. Checked before measuring, so that
    a bad --merge file is refused before minutes of work.
    """
    if (not isinstance(earlier, dict) or not isinstance(earlier.get("models"), list)
            or not all(isinstance(m, str) for m in earlier["models"]) or not isinstance(earlier.get("rows"), list)
            or not all(isinstance(r, dict) and isinstance(r.get("model"), str) for r in earlier["rows"])):
        raise ValueError("--merge: the file is not a result of `--output` (a JSON object with a list of model names "
                         "under \"models\" and of rows under \"rows\")")
    for key, value in settings.items():
        if earlier.get(key) != value:
            raise ValueError(f"--merge: the earlier run's {key} is {earlier.get(key)!r}, this run's {value!r}; "
                             "merge only runs of the same settings on the same machine")


def merge(result, earlier):
    """`result` with the rows of the models it lacks taken from `earlier` (an earlier `run` result, as JSON).

    Each model's files are timed in interleaved rounds of their own, so a model measured in another run of the
    same settings on the same machine compares alike; its peer rows, notes and measuring time come with it, and
    the bars are computed again over all rows.

    Raises:
        ValueError: `earlier` is no `run` result, or the two runs differ in machine, weights, samples, rounds or runs
            (the message names it; `check_merge`).
    """
    check_merge(earlier, {key: result[key] for key in ("machine", "weights", "samples", "rounds", "runs")})
    taken = [m for m in earlier.get("models", []) if m not in result["models"]]
    if not taken:
        return result
    models = [m for m in MODELS if m in result["models"] or m in taken] + [m for m in result["models"] if m not in MODELS]

    def owner(text):  # "Ti16", "Ti16 (HF PyTorch, litert-torch)", "Ti16: note" -> "Ti16"
        return text.split(":")[0].split(" ")[0]

    rows = [r for m in models for r in (result["rows"] if m in result["models"] else earlier["rows"])
            if owner(r["model"]) == m]
    notes = result["notes"] + [n for n in earlier.get("notes", [])
                               if owner(n) in taken or (n.startswith("peer row") and "Ti16" in taken)]
    measured = {**{m: t for m, t in earlier.get("measured", {}).items() if m in taken}, **result.get("measured", {})}
    merged = {**result, "models": models, "rows": rows, "notes": notes, "measured": measured}
    merged["bars"] = bars(rows) + judge_bars(rows)
    return merged
