"""`make demo` as the README states it (1 of 3): train on digits with its recipe and meet the accuracy bar.

The export's bars: tests/test_demo_export.py; the browser and the guides: tests/test_demo_browser.py (the
job is made once per run: tests/demo_run.py).
"""

import json

import pytest

from tests import demo_run

pytestmark = [pytest.mark.slow, pytest.mark.export]


def test_demo_training_meets_the_readme_accuracy_bar(tmp_path_factory):
    out = demo_run.trained(tmp_path_factory)
    metrics = json.loads((out / "metrics.json").read_text())
    # docs/demo.md: at least 97% held-out (98.3-98.9% on seeds 0-2 here; 97.5% on one CI machine, whose CPU rounds
    # differently: the bar keeps a margin of about three of the 360 images)
    assert metrics["accuracy"] >= 0.97, metrics
    assert metrics["recipe"] == demo_run.demo_train_flags()[demo_run.demo_train_flags().index("--recipe") + 1]
