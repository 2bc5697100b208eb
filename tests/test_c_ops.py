"""The C backend's op tables (targets/c/ops.py): one entry per elementwise op of engine/ir/ops.py,
checked at import, naming the op that lacks one."""

from __future__ import annotations

import subprocess
import sys

import pytest
from stitch.engine.ir.ops import OPS
from stitch.targets.c import ops


def test_the_tables_cover_the_elementwise_ops():
    elementwise = {name for name, spec in OPS.items() if spec.elementwise}
    assert set(ops.C_OPS) == set(ops.VECTOR_OPS) == elementwise
    ops.check_tables({"C_OPS": ops.C_OPS, "VECTOR_OPS": ops.VECTOR_OPS})


@pytest.mark.parametrize("table", ["C_OPS", "VECTOR_OPS"])
def test_a_table_missing_an_op_fails_naming_it(table):
    tables = {"C_OPS": ops.C_OPS, "VECTOR_OPS": ops.VECTOR_OPS}
    tables[table] = {op: form for op, form in tables[table].items() if op != "tanh"}
    with pytest.raises(NotImplementedError, match=rf"ops.py's {table} has no entry for the elementwise op tanh"):
        ops.check_tables(tables)


def test_an_op_added_without_its_c_fails_at_import():
    """A new unary op in engine/ir/ops.py alone: importing the C backend raises, naming it."""
    code = ("import stitch.engine.ir.ops as o\n"
            "o.OPS['hypothetical'] = o.OpSpec('hypothetical', o.OpGroup.UNARY, 1, o.FLOAT)\n"
            "import stitch.targets.c.ops\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode != 0
    assert "has no entry for the elementwise op hypothetical of engine/ir/ops.py" in proc.stderr


def test_a_scalar_entry_writes_the_ops_c():
    assert ops.scalar_op("add", "f32", ["x", "y"], ["f32", "f32"]) == "((float)(x + y))"
    assert ops.scalar_op("exp", "f16", ["x"], ["f16"]) == "((_Float16)st_expf(x))"
    assert ops.scalar_op("cast", "i32", ["x"], ["f32"]) == "st_cast_i32_f32(x)"
    assert ops.vector_op("tanh", ["v"]) == "st_tanhv_f32(v)"
    assert ops.vector_op("log", ["v"]) is None
