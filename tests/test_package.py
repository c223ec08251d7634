"""Package-level contracts: import direction, public names, docstrings."""

import ast
import pathlib
import subprocess
import sys

import keras_vit

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_keras_vit_never_imports_export_or_its_runtimes():
    script = (
        "import sys, keras_vit, keras_vit.data, keras_vit.training, keras_vit.train\n"
        "bad = [m for m in ('export', 'tf2onnx', 'onnxruntime', 'ai_edge_litert', 'torch', 'transformers', 'vit_keras')\n"
        "       if m in sys.modules]\n"
        "print('LOADED', bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "LOADED []" in result.stdout, result.stdout + result.stderr[-2000:]


def test_layer_and_model_modules_do_not_import_the_weights_package():
    for folder in ("layers", "models"):
        for path in (ROOT / "keras_vit" / folder).rglob("*.py"):
            top_level = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, (ast.Import, ast.ImportFrom))]  # inside functions too
            names = [a.name for n in top_level for a in n.names] + [n.module or "" for n in top_level if isinstance(n, ast.ImportFrom)]
            assert not [n for n in names if "weights" in n], path


def test_public_names():
    assert set(keras_vit.__all__) == {
        "layers", "VisionTransformer", "ViTTi16", "ViTS16", "ViTS32", "ViTB8", "ViTB16", "ViTB32",
        "ViTL16", "ViTL32", "ViTH14", "preprocess_input", "decode_predictions", "weights",
        "ViTR26S32", "ViTR50B16", "ViTR50L32", "resize",
    }
    assert all(hasattr(keras_vit, name) for name in keras_vit.__all__)


def test_every_public_function_and_class_has_a_docstring():
    missing = []
    for path in (ROOT / "keras_vit").rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if not ast.get_docstring(node):
                    missing.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    assert not missing


def test_the_distribution_has_a_name_of_its_own():
    """PyPI's `keras-vit` (1.0.1, another project) imports as `keras_vit` too: this one is published under another
    name (setup.cfg), and the installed `keras_vit` package is this distribution's (README.md)."""
    import configparser
    import importlib.metadata
    import re

    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    name = config["metadata"]["name"]
    normalised = re.sub(r"[-_.]+", "-", name).lower()  # PEP 503
    assert normalised == "keras-vit-applications"
    assert set(importlib.metadata.packages_distributions()["keras_vit"]) == {name}
