"""One table of export modes (issue 44): every list, bar, label, alias and help text of a mode derives from its record in
export/modes.py, and no other module of export/ spells a mode's name. The modules are read as text with `ast`."""

import ast
import pathlib
import re

import pytest

from export import _cli_text, fast_path, litert_quantization, modes, onnx_quantization, tflite, tolerances
from export.modes import FORMATS, ONNX, TFLITE

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXPORT = sorted(p for p in (ROOT / "export").glob("*.py") if p.name != "modes.py")
# names of modes that are also dtype names: a literal of theirs may be a dtype, so only comparisons are checked
DTYPES = ("float32", "float16", "int8")
# what a new mode's name looks like, so that one spelled in a module without a record is found too
MODE_LIKE = re.compile(r"^(float\d+_fused|dynamic_int\d+|weight_only_int\d+|int\d+x\d+|int\d+_mixed\d+)$")
# an expression that holds a mode's name: `quantization`, `q`, `row["quantization"]`, not a record's attribute
QUANTIZATION = re.compile(r"^(\w*quantizations?|q|\w+\[['\"]quantization['\"]\])$")


def _strings(path):
    """(line, text) of every string constant of a module but its docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings)


def _mode_comparisons(path):
    """(line, source) of every comparison of a quantization-named expression with a string literal."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Compare):
            continue
        parts = [node.left, *node.comparators]
        literals = [c for part in parts for c in ([part] if isinstance(part, ast.Constant) else
                                                  getattr(part, "elts", [])) if isinstance(c, ast.Constant)]
        named = [ast.unparse(part) for part in parts if not isinstance(part, (ast.Constant, ast.Tuple, ast.List))]
        if any(isinstance(c.value, str) for c in literals) and any(QUANTIZATION.match(n) for n in named):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_other_module_of_export_spells_a_modes_name():
    """A mode's name is written once, in its record. A string of another module that holds a name only a mode has
    (int8_mixed16, ...), or one that looks like a new mode's, fails, as does a comparison of a quantization with a
    string literal: the code asks the record (`mode.calibrated`, `mode.converter`, ...) instead."""
    distinct = {name for table in FORMATS.values() for name in table} - set(DTYPES)
    spelled = []
    for path in EXPORT:
        for line, text in _strings(path):
            words = set(re.findall(r"[A-Za-z_][\w]*", text))
            if words & distinct or MODE_LIKE.match(text):
                spelled.append(f"{path.name}:{line}: {text[:80]!r}")
        spelled += [f"{path.name}:{line}: {source}" for line, source in _mode_comparisons(path)]
    assert spelled == [], "spell these through export.modes:\n" + "\n".join(spelled)


def test_the_spelling_check_finds_a_mode_outside_its_record(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('"""int8_mixed16 in a docstring is prose."""\nif quantization == "int3":\n    x = "int8_mixed16"\n'
                    'y = "weight_only_int2"\n')
    assert [line for line, _ in _mode_comparisons(path)] == [2]
    assert [text for _, text in _strings(path) if MODE_LIKE.match(text)] == ["int8_mixed16", "weight_only_int2"]


def test_every_list_of_modes_derives_from_the_records():
    assert tflite.QUANTIZATIONS == tuple(TFLITE) and onnx_quantization.ONNX_QUANTIZATIONS == tuple(ONNX)
    assert set(tflite.TF_QUANTIZATIONS) | set(litert_quantization.LITERT_QUANTIZATIONS) == set(TFLITE)
    assert tflite.DEFAULT_QUANTIZATIONS == ("float32", "float16", "dynamic_int8", "int8")  # the CLI's default set
    assert tflite.CALIBRATED == ("int8", "full_integer_int8", "int16x8", "int8_mixed16")
    # int8 is the phone-CPU file (float ops by design); the integer-only files are the NPUs' (issue 45)
    assert modes.names("tflite", integer_only=True) == ("full_integer_int8", "int8_mixed16")
    assert tflite.TF_QUANTIZATIONS == ("float32", "float16", "dynamic_int8", "full_integer_int8")
    assert [m for m in TFLITE if len(TFLITE[m].io_types) > 1] == ["full_integer_int8"]
    assert tflite.DYNAMIC_SIZE_QUANTIZATIONS == ("float32", "float16", "dynamic_int8")
    assert set(tflite.DYNAMIC_SIZE_REFUSED) == set(TFLITE) - set(tflite.DYNAMIC_SIZE_QUANTIZATIONS)
    assert onnx_quantization.INT8_QUANTIZATIONS == ("dynamic_int8", "int8")
    assert {(fmt, name) for fmt, table in FORMATS.items() for name in table} | {("saved_model", "float32")} \
        == set(fast_path.FAST_PATH)
    assert all(fast_path.fast_path(mode.format, mode.name) == mode.runs_fast_on
               for table in FORMATS.values() for mode in table.values())


def test_each_record_is_complete_and_a_name_has_one_set_of_bars():
    for table in FORMATS.values():
        for mode in table.values():
            assert mode.help and mode.why and mode.runs_fast_on, mode.name
            assert set(mode.tolerances) <= {"relative_max_abs_diff", "decisive_top1_agreement", "accuracy_drop"}
            assert set(mode.token_tolerances) <= {"relative_max_abs_diff", "cosine"} and mode.token_tolerances
            assert not set(mode.aliases) & set(table), mode.name  # an alias never shadows a mode's own name
            one_set = (f"{mode.format} {mode.name!r}: a name both formats have holds one set of bars "
                       "(export.tolerances.TOLERANCES is keyed by name): change both records")
            assert tolerances.TOLERANCES[mode.name] == mode.tolerances, one_set
            assert tolerances.TOKEN_TOLERANCES[mode.name] == mode.token_tolerances, one_set
    assert _cli_text.QUANTIZATION_ALIASES["int4"] == ("dynamic_int4", "weight_only_int4")
    assert _cli_text.ONNX_QUANTIZATION_ALIASES["qdq"] == "int8"
    # TensorFlow's names of the integer-only file lead to full_integer_int8, not to the phone-CPU int8 (issue 45)
    assert {_cli_text.QUANTIZATION_ALIASES[a] for a in ("uint8", "full-int8", "full-integer", "integer-only")} \
        == {"full_integer_int8"}


def test_the_docs_table_is_the_records_table():
    text = (ROOT / "docs" / "export.md").read_text()
    table = text.split("<!-- modes:begin -->\n", 1)[1].split("\n<!-- modes:end -->", 1)[0]
    assert table == modes.markdown_table(), "regenerate docs/export.md's table with export.modes.markdown_table()"


@pytest.mark.parametrize("fmt,name", [("tflite", "int9"), ("onnx", "int16x8"), ("coreml", "float32")])
def test_an_unknown_mode_or_format_is_refused_by_name(fmt, name):
    with pytest.raises(ValueError, match=name if fmt != "coreml" else "fmt"):
        modes.mode(fmt, name)
