"""Shared fixtures: tiny configurations, policy reset, GPU and backend markers.

`make test` runs every test on the TensorFlow backend, then the model side's
tests (`tests/run_suite.py` `BACKEND_TESTS`) again under `KERAS_BACKEND=jax` and
`KERAS_BACKEND=torch`, each backend in its own process (issue 15). There,
tests marked `tensorflow_only` (TensorFlow itself is what they test: tf.data,
tf.function, TFLite, vit-keras) are skipped, and so are those marked
`backend_independent` (the big variants' parameter counts, which no backend
changes: they run once, on TensorFlow).
"""

import gc
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import pytest  # noqa: E402

from tests import suite_budget  # noqa: E402

BACKEND = keras.backend.backend()
# compile_model's jit_compile="auto": XLA on TensorFlow and JAX, none (no torch.compile) on PyTorch.
XLA_BY_DEFAULT = BACKEND != "torch"

TINY = {
    "patch_size": 4,
    "hidden_size": 32,
    "num_layers": 2,
    "num_heads": 4,
    "mlp_dim": 64,
    "input_shape": (16, 16, 3),
    "classes": 5,
}


# A full collection (thawed) after every 8th module, or sooner when the process grew by 1 GiB since the last one.
THAW_EVERY_MODULES = 8
THAW_AFTER_GROWTH = 1 << 30
_since_thaw = {"modules": 0, "rss": 0}


@pytest.fixture(scope="module", autouse=True)
def _collect_then_freeze_after_each_module():
    """After each test module: collect the garbage, then freeze what survives (`gc.freeze`).

    Keras calls `gc.collect()` each time a layer drops a variable (`Layer.__delattr__`: 14 times in one
    `model.quantize` of a tiny ViT), and one full collection scans every object of this long process. Late in
    the suite that was about 4 s a collection (a tiny model's `quantize` took 55 s). Frozen objects are not
    scanned, so a collection inside a module sees that module's objects only.

    A module's garbage is collected at its end without thawing (its own objects only: cheap). Cycles that reach
    into frozen objects wait for the next full collection, which thaws everything first: after every
    `THAW_EVERY_MODULES`-th module, or sooner once the process has grown by `THAW_AFTER_GROWTH` bytes. Thawing
    after every module cost about 5 s a module, some 7 minutes of the suite.
    """
    yield
    _since_thaw["modules"] += 1
    grown = suite_budget.rss_bytes() - _since_thaw["rss"]
    if _since_thaw["modules"] >= THAW_EVERY_MODULES or grown > THAW_AFTER_GROWTH:
        gc.unfreeze()
        gc.collect()
        _since_thaw.update(modules=0, rss=suite_budget.rss_bytes())
    else:
        gc.collect()
    gc.freeze()


@pytest.fixture
def tiny_config():
    """A ViT small enough to build and run in well under a second."""
    return dict(TINY)


@pytest.fixture
def policy():
    """Yields a setter for the global dtype policy and restores float32 after."""
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


def pytest_configure(config):
    """Each module's wall time and memory, written to runs/test-budget/ (tests/suite_budget.py, issue 42)."""
    suite_budget.pytest_configure(config)


def pytest_collection_modifyitems(config, items):
    if BACKEND == "jax":
        import jax

        if jax.default_backend() == "cpu":  # "The precision 'F16_F16_F32' is not supported by dot_general on CPU"
            skip_f16 = pytest.mark.skip(reason="JAX's CPU backend has no float16 matrix product (mixed_float16)")
            for item in items:
                if "float16_matmul" in item.keywords:
                    item.add_marker(skip_f16)
    if BACKEND != "tensorflow":
        skip_tf = pytest.mark.skip(reason=f"TensorFlow itself is tested (backend {BACKEND!r} runs the model side only)")
        skip_same = pytest.mark.skip(reason="the same on every backend (variable shapes come from the builders): "
                                            "run once, on TensorFlow")
        for item in items:
            if "tensorflow_only" in item.keywords:
                item.add_marker(skip_tf)
            elif "backend_independent" in item.keywords:
                item.add_marker(skip_same)
    import tensorflow as tf  # installed with the test extra; GPUs are judged by TensorFlow (tests/test_gpu.py)

    if tf.config.list_physical_devices("GPU"):
        return
    skip = pytest.mark.skip(reason="needs a GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
