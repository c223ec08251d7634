"""Smoke test of benchmarks.tflite_batch on a tiny ViT: the figures behind the batch-1 default of TFLite files."""

import pytest

pytestmark = pytest.mark.export


def test_dynamic_batch_adds_shape_ops_and_partitions_batch_one_has_none(tmp_path):
    from benchmarks.tflite_batch import main, markdown, measure

    rows = measure(["tiny"], rounds=1, runs=2, folder=str(tmp_path))
    table = {(r["quantization"], r["batch"]): r for r in rows}
    assert set(table) == {("float32", 1), ("float32", "dynamic"), ("full_integer_int8", 1),
                          ("full_integer_int8", "dynamic")}
    for q in ("float32", "full_integer_int8"):
        dynamic, fixed = table[(q, "dynamic")], table[(q, 1)]
        assert dynamic["shape_ops"] > 0 and fixed["shape_ops"] == 0
        assert dynamic["ops"] > fixed["ops"] and dynamic["partitions"] > fixed["partitions"]
    assert table[("float32", 1)]["partitions"] == 2
    assert all(r["ms_1_thread"] > 0 and r["ms_2_threads"] > 0 for r in rows)
    assert len(markdown(rows).splitlines()) == 2 + len(rows)
    with pytest.raises(SystemExit) as exit_info:
        main(["--rounds", "0"])
    assert exit_info.value.code == 2
