"""ONNX import with symbolic dimensions (issue 44, item 5): a graph input's dim_param becomes a symbol of
the func, and the shape arithmetic on it is carried symbolically. Each shape op on a dim_param input is
checked against onnx's reference evaluator at several sizes from one import; the dynamic-axis exports of
tests/fixtures/models/dynamic/ against onnxruntime's outputs at every stored size. Needs only onnx."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from stitch.engine.cli import main  # noqa: E402
from stitch.engine.ir import dims  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.errors import StitchError  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends import onnx_lazy as lz  # noqa: E402
from stitch.frontends.onnx_import import OnnxImportError, import_onnx  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
RNG = np.random.default_rng(7)
DYNAMIC = Path(__file__).resolve().parent / "fixtures" / "models" / "dynamic"


def ints(name: str, *values) -> onnx.TensorProto:
    """A 1-D int64 initializer."""
    return numpy_helper.from_array(np.array(values, np.int64), name)


def scalar(name: str, value: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, np.int64), name)


def model_of(nodes, inputs, outputs, initializers=(), opset=20):
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [onnx.ValueInfoProto(name=n) for n in outputs]
    graph = helper.make_graph(nodes, "g", vi, vo, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def node(op, ins, outs, **attrs):
    return helper.make_node(op, ins, outs, **attrs)


def draw(model, sizes: dict[str, int]) -> dict[str, np.ndarray]:
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value if d.HasField("dim_value") else sizes[d.dim_param] for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == I64:
            feeds[vi.name] = RNG.integers(0, 8, shape).astype(np.int64)
        else:
            feeds[vi.name] = RNG.standard_normal(shape).astype(np.float32)
    return feeds


def assert_symbolic_matches(model, sizes: list[dict[str, int]], **kwargs):
    """One import; at each size, the interpreter against onnx's reference evaluator. Returns the import."""
    imported = import_onnx(model, **kwargs)
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    assert graph.symbols, imported.text
    for size in sizes:
        feeds = draw(model, size)
        want = ReferenceEvaluator(model).run(None, feeds)
        with np.errstate(all="ignore"):
            got = evaluate(graph, {imported.inputs[k]: v for k, v in feeds.items()} | imported.weights)
        for g, w in zip(got, want, strict=True):
            assert g.shape == w.shape and g.dtype == w.dtype, (size, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=str(size))
    return imported


NS = [{"n": 1}, {"n": 5}, {"n": 16}]


def test_shape_gather_unsqueeze_concat_reshape():
    """A reshape whose target is built from the input's own shape: [n, 4] -> Concat(Shape[0], [2, 2])."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Unsqueeze", ["n", "axis0"], ["n1"]), node("Concat", ["n1", "tail"], ["target"], axis=0),
             node("Reshape", ["x", "target"], ["y"])]
    model = model_of(nodes, [("x", F32, ["n", 4])], ["y"], [scalar("zero", 0), ints("axis0", 0), ints("tail", 2, 2)])
    imported = assert_symbolic_matches(model, NS)
    assert "func g[n: 1..2147483647](x: f32[n, 4]) -> f32[n, 2, 2]" in imported.text
    assert "reshape(x, shape=[n, 2, 2])" in imported.text


def test_reshape_solves_minus_one_symbolically():
    """-1 of [2, n, 4] to [-1, 4] is 2 * n; of [1, 4, n, 16] to [-1, n, 16] is 4 (the factors cancel)."""
    nodes = [node("Reshape", ["x", "flat"], ["y"]), node("Shape", ["z"], ["s"]),
             node("Slice", ["s", "two", "three"], ["n"]), node("Concat", ["minus", "n", "sixteen"], ["t"], axis=0),
             node("Reshape", ["z", "t"], ["w"])]
    model = model_of(nodes, [("x", F32, [2, "n", 4]), ("z", F32, [1, 4, "n", 16])], ["y", "w"],
                     [ints("flat", -1, 4), ints("two", 2), ints("three", 3), ints("minus", -1), ints("sixteen", 16)])
    imported = assert_symbolic_matches(model, NS)
    assert "-> (f32[n * 2, 4], f32[4, n, 16])" in imported.text


def test_arithmetic_on_shape_values():
    """Add, Sub, Mul and integer Div on a dimension: [n, 4] -> [(4 * n) // 2, 2], then [n + 1 - 1, ...]."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Mul", ["n", "four"], ["n4"]), node("Div", ["n4", "two"], ["half"]),
             node("Add", ["half", "one"], ["plus"]), node("Sub", ["plus", "one"], ["rows"]),
             node("Unsqueeze", ["rows", "axis0"], ["r1"]), node("Concat", ["r1", "two1"], ["t"], axis=0),
             node("Reshape", ["x", "t"], ["y"])]
    model = model_of(nodes, [("x", F32, ["n", 4])], ["y"],
                     [scalar("zero", 0), scalar("four", 4), scalar("two", 2), scalar("one", 1), ints("axis0", 0),
                      ints("two1", 2)])
    imported = assert_symbolic_matches(model, NS)
    assert "f32[n * 2, 2]" in imported.text


def test_slice_with_symbolic_ends_and_starts():
    """x[1:n] (ends from the shape) and x[n - 2:n] (the last two rows): n from 2, declared with a range."""
    nodes = [node("Shape", ["x"], ["s"]), node("Slice", ["s", "zero", "one"], ["n"]),
             node("Slice", ["x", "one", "n", "zero"], ["y"]), node("Sub", ["n", "two"], ["m"]),
             node("Slice", ["x", "m", "n", "zero"], ["last"])]
    model = model_of(nodes, [("x", F32, ["n", 3])], ["y", "last"], [ints("zero", 0), ints("one", 1), ints("two", 2)])
    imported = assert_symbolic_matches(model, [{"n": 2}, {"n": 9}], dim_ranges={"n": (2, 64)})
    assert "func g[n: 2..64]" in imported.text
    assert "slice(x, axes=[0], starts=[n - 2], ends=[n])" in imported.text
    with pytest.raises(OnnxImportError, match="may be empty for some values of the symbols"):
        import_onnx(model)  # n = 1 would give x[1:1]


def test_range_into_a_table_is_a_slice_and_bounds_the_symbol():
    """Positions arange(n) read from a table of 16 rows: a slice, and n narrowed to 1..16 (onnxruntime
    fails beyond); a range the caller gave is never narrowed."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Range", ["zero", "n", "one"], ["pos"]), node("Gather", ["table", "pos"], ["rows"], axis=0),
             node("Add", ["x", "rows"], ["y"])]
    table = numpy_helper.from_array(RNG.standard_normal((16, 3)).astype(np.float32), "table")
    model = model_of(nodes, [("x", F32, ["n", 3])], ["y"], [scalar("zero", 0), scalar("one", 1), table])
    imported = assert_symbolic_matches(model, [{"n": 1}, {"n": 7}, {"n": 16}])
    assert "# n: 1..16, the positions Gather 'rows' reads in 'table' (16 rows)" in imported.text
    assert "func g[n: 1..16]" in imported.text and "slice(table, axes=[0], starts=[0], ends=[n])" in imported.text
    assert "[n: 1..8]" in import_onnx(model, dim_ranges={"n": (1, 8)}).text
    with pytest.raises(OnnxImportError, match=r"Gather 'rows'.*beyond its rows.*--dim-range"):
        import_onnx(model, dim_ranges={"n": (1, 100)})


def test_position_ids_after_a_cache_of_past_positions():
    """arange(past, past + 1): one row of the table at a symbolic position, the cache grown by one."""
    nodes = [node("Shape", ["cache"], ["s"]), node("Gather", ["s", "zero"], ["past"], axis=0),
             node("Add", ["past", "one"], ["end"]), node("Range", ["past", "end", "one"], ["pos"]),
             node("Gather", ["table", "pos"], ["row"], axis=0), node("Add", ["new", "row"], ["fresh"]),
             node("Concat", ["cache", "fresh"], ["y"], axis=0)]
    table = numpy_helper.from_array(RNG.standard_normal((32, 3)).astype(np.float32), "table")
    model = model_of(nodes, [("cache", F32, ["past", 3]), ("new", F32, [1, 3])], ["y"],
                     [scalar("zero", 0), scalar("one", 1), table])
    imported = assert_symbolic_matches(model, [{"past": 1}, {"past": 20}, {"past": 31}])
    assert "func g[past: 1..31]" in imported.text and "-> f32[past + 1, 3]" in imported.text
    assert "slice(table, axes=[0], starts=[past], ends=[past + 1])" in imported.text


def test_causal_mask_from_the_length():
    """scores + where(k <= q, 0, -inf) over arange(n): the mask computed from positions, the softmax exact."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Range", ["zero", "n", "one"], ["pos"]), node("Unsqueeze", ["pos", "axis0"], ["k"]),
             node("Unsqueeze", ["pos", "axis1"], ["q"]), node("LessOrEqual", ["k", "q"], ["mask"]),
             node("Where", ["mask", "fzero", "ninf"], ["bias"]), node("Transpose", ["x"], ["xt"], perm=[1, 0]),
             node("MatMul", ["x", "xt"], ["scores"]), node("Add", ["scores", "bias"], ["masked"]),
             node("Softmax", ["masked"], ["y"], axis=-1)]
    inits = [scalar("zero", 0), scalar("one", 1), ints("axis0", 0), ints("axis1", 1),
             numpy_helper.from_array(np.array(0.0, np.float32), "fzero"),
             numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")]
    model = model_of(nodes, [("x", F32, ["n", 4])], ["y"], inits)
    imported = assert_symbolic_matches(model, [{"n": 1}, {"n": 6}], dim_ranges={"n": (1, 512)})
    assert "iota(shape=[n], axis=0, dtype=i64)" in imported.text and "positions" not in imported.text


def test_decided_masks_and_fills_fold_away():
    """A comparison that holds for every position (k <= past for k in arange(past + 1)) is a fill; Expand
    and ConstantOfShape of a symbolic shape are fills; none of them becomes program code."""
    nodes = [node("Shape", ["cache"], ["s"]), node("Gather", ["s", "zero"], ["past"], axis=0),
             node("Add", ["past", "one"], ["total"]), node("Range", ["zero", "total", "one"], ["k"]),
             node("LessOrEqual", ["k", "past"], ["visible"]), node("Cast", ["visible"], ["vis"], to=F32),
             node("Concat", ["cache", "new"], ["grown"], axis=0), node("Shape", ["grown"], ["gs"]),
             node("ConstantOfShape", ["gs"], ["ones"], value=numpy_helper.from_array(np.ones(1, np.float32))),
             node("Unsqueeze", ["vis", "axis1"], ["vis1"]), node("Mul", ["grown", "vis1"], ["kept"]),
             node("Add", ["kept", "ones"], ["y"])]
    model = model_of(nodes, [("cache", F32, ["past", 3]), ("new", F32, [1, 3])], ["y"],
                     [scalar("zero", 0), scalar("one", 1), ints("axis1", 1)])
    imported = assert_symbolic_matches(model, [{"past": 1}, {"past": 9}])
    assert "positions" not in imported.text and "broadcast_to" not in imported.text


def test_expand_and_where_on_shape_vectors():
    """The TorchScript pattern: Where(Equal(shape, -1), 1, shape) as Expand's target."""
    nodes = [node("Shape", ["x"], ["s"]), node("Equal", ["s", "minus"], ["is_minus"]),
             node("Where", ["is_minus", "ones", "s"], ["target"]), node("Expand", ["bias", "target"], ["wide"]),
             node("Add", ["x", "wide"], ["y"])]
    inits = [ints("minus", -1, -1), ints("ones", 1, 1),
             numpy_helper.from_array(RNG.standard_normal((1, 4)).astype(np.float32), "bias")]
    model = model_of(nodes, [("x", F32, ["n", 4])], ["y"], inits)
    assert_symbolic_matches(model, NS)


def test_cumsum_position_ids_and_max():
    """position ids cumsum(ones) - 1 along a symbolic axis; Max(0, them) decided (they are >= 0)."""
    nodes = [node("Shape", ["ids"], ["s"]), node("ConstantOfShape", ["s"], ["ones"],
                                                 value=numpy_helper.from_array(np.ones(1, np.int64))),
             node("CumSum", ["ones", "one"], ["c"]), node("Sub", ["c", "one"], ["pos"]),
             node("Max", ["pos", "zero"], ["pos0"]), node("Gather", ["table", "pos0"], ["y"], axis=0)]
    table = numpy_helper.from_array(RNG.standard_normal((40, 2)).astype(np.float32), "table")
    model = model_of(nodes, [("ids", I64, [1, "n"])], ["y"], [scalar("one", 1), scalar("zero", 0), table])
    imported = assert_symbolic_matches(model, [{"n": 1}, {"n": 40}])
    assert "[n: 1..40]" in imported.text and "gather" not in imported.text


def test_a_position_buffer_cut_to_the_length_bounds_the_symbol():
    """BERT's position ids: a buffer arange(16) cut to [:n] (a progression, so a formula) read from a
    table: n narrowed to 1..16, the end of the cut; GatherElements of the buffer at those positions."""
    nodes = [node("Shape", ["x"], ["s"]), node("Slice", ["s", "zero", "one"], ["n"]),
             node("Slice", ["buffer", "zero", "n", "one"], ["pos"]), node("Squeeze", ["pos", "zero"], ["p"]),
             node("GatherElements", ["buffer", "pos"], ["again"], axis=1), node("Squeeze", ["again", "zero"], ["q"]),
             node("Gather", ["table", "p"], ["rows"], axis=0), node("Gather", ["table", "q"], ["rows2"], axis=0),
             node("Add", ["rows", "rows2"], ["both"]), node("Add", ["x", "both"], ["y"])]
    buffer = numpy_helper.from_array(np.arange(16, dtype=np.int64).reshape(1, 16), "buffer")
    table = numpy_helper.from_array(RNG.standard_normal((32, 3)).astype(np.float32), "table")
    model = model_of(nodes, [("x", F32, ["n", 3])], ["y"], [ints("zero", 0), ints("one", 1), buffer, table])
    imported = assert_symbolic_matches(model, [{"n": 1}, {"n": 16}])
    assert "# n: 1..16, so that Slice 'pos' ends within its axis of 16" in imported.text
    assert "gather" not in imported.text


def test_gather_nd_of_a_mask_at_batch_and_key_positions():
    """HuggingFace's padding mask read at (batch, key position): slices, a reshape, no gather."""
    nodes = [node("Shape", ["mask"], ["s"]), node("Gather", ["s", "one"], ["n"], axis=0),
             node("Range", ["zero", "n", "one"], ["keys"]), node("Unsqueeze", ["keys", "axes01"], ["k3"]),
             node("Shape", ["mask"], ["s2"]), node("Concat", ["s2", "ones1"], ["wide"], axis=0),
             node("Expand", ["k3", "wide"], ["kk"]), node("Expand", ["batch", "wide"], ["bb"]),
             node("Concat", ["bb", "kk"], ["where"], axis=-1), node("GatherND", ["mask", "where"], ["picked"]),
             node("Cast", ["picked"], ["y"], to=F32)]
    inits = [scalar("zero", 0), scalar("one", 1), ints("axes01", 0, 2), ints("ones1", 1),
             numpy_helper.from_array(np.array([[[0]], [[1]], [[2]]], np.int64), "batch")]
    model = model_of(nodes, [("mask", TensorProto.BOOL, [3, "n"])], ["y"], inits)
    feeds_model = model  # (bool inputs are drawn as integers 0..7: cast below)
    imported = import_onnx(feeds_model, dim_ranges={"n": (1, 40)})
    graph = next(iter(check_program(imported.program).values()))
    assert "gather" not in imported.text
    for n in (1, 9):
        mask = RNG.integers(0, 2, (3, n)).astype(bool)
        (want,) = ReferenceEvaluator(model).run(None, {"mask": mask})
        (got,) = evaluate(graph, {"mask": mask} | imported.weights)
        np.testing.assert_array_equal(got, want)


def test_cast_of_a_shape_value_is_read_at_run_time():
    """A dimension used as data (x * float(n)): its value read from a run of positions, an iota computed
    where it is read, so the symbol needs no bounded range (issue 44 item 5: no positions parameter)."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "zero"], ["n"], axis=0),
             node("Cast", ["n"], ["nf"], to=F32), node("Mul", ["x", "nf"], ["y"])]
    model = model_of(nodes, [("x", F32, ["n", 2])], ["y"], [scalar("zero", 0)])
    assert_symbolic_matches(model, [{"n": 1}, {"n": 30}], dim_ranges={"n": (1, 30)})
    imported = assert_symbolic_matches(model, [{"n": 1}, {"n": 3000}])
    assert "iota(shape=[n + 1]" in imported.text and "positions" not in imported.text


def test_two_symbols_and_a_fixed_one():
    """Symbols in order of appearance; --dim fixes one of them; a symbol broadcasts only with itself."""
    nodes = [node("MatMul", ["a", "b"], ["y"])]
    model = model_of(nodes, [("a", F32, ["batch", "m", 8]), ("b", F32, [8, "k"])], ["y"])
    with pytest.raises(OnnxImportError, match=r"input 'a'.*too large at the symbols' largest values.*--dim-range"):
        import_onnx(model)  # batch * m * 8 floats at the default ranges' high ends
    ranges = {"batch": (1, 8), "m": (1, 4096), "k": (1, 4096)}
    imported = assert_symbolic_matches(model, [{"batch": 2, "m": 3, "k": 5}], dim_ranges=ranges)
    assert "func g[batch: 1..8, m: 1..4096, k: 1..4096](a: f32[batch, m, 8], b: f32[8, k])" in imported.text
    fixed = import_onnx(model, dims={"k": 5}, dim_ranges={"m": (1, 16), "batch": (1, 4)})
    assert "func g[batch: 1..4, m: 1..16](a: f32[batch, m, 8], b: f32[8, 5])" in fixed.text
    clash = model_of([node("Add", ["a", "c"], ["y"])], [("a", F32, ["n"]), ("c", F32, ["m"])], ["y"])
    with pytest.raises(OnnxImportError, match="shapes do not broadcast"):
        import_onnx(clash)


def test_symbols_are_ir_names():
    """A dim_param is any string: its symbol is an IR name, apart from dtypes and reserved words."""
    model = model_of([node("Relu", ["a"], ["y"]), node("Relu", ["b"], ["z"])],
                     [("a", F32, ["batch size", "f32"]), ("b", F32, [1, "func"])], ["y", "z"])
    imported = import_onnx(model, dim_ranges={"batch size": (1, 4), "f32": (1, 8), "func": (1, 8)})
    assert "func g[batch_size: 1..4, f32_1: 1..8, func_1: 1..8](a: f32[batch_size, f32_1], b: f32[1, func_1])" \
        in imported.text
    assert imported.symbols == {"batch size": "batch_size", "f32": "f32_1", "func": "func_1"}


# -- what the IR cannot express: an error naming the node ---------------------------------------------------


def test_unnamed_dynamic_dimension_is_an_error():
    model = model_of([node("Relu", ["x"], ["y"], name="r")], [("x", F32, [None, 4])], ["y"])
    with pytest.raises(OnnxImportError, match=r"Relu 'r'.*dynamic dimension with no name \(no dim_param\)"):
        import_onnx(model)


@pytest.mark.parametrize("nodes, inits, match", [
    # a -1 that is no polynomial: (3 * n) / 2
    ([node("Reshape", ["x", "t"], ["y"], name="r")], [ints("t", -1, 2)], r"Reshape 'r'.*n \* 3 / 2"),
    # a CumSum of data along a symbolic axis
    ([node("CumSum", ["x", "zero"], ["y"], name="c")], [scalar("zero", 0)],
     r"CumSum 'c'.*f32\[n, 3\].*only where these sizes are static"),
    # Squeeze without axes: whether n is 1 is known only at run time
    ([node("Squeeze", ["x"], ["y"], name="s")], [], r"Squeeze 's'.*known only at run time"),
    # a shape computed from data
    ([node("Cast", ["x"], ["xi"], to=I64), node("ReduceMax", ["xi"], ["m"], keepdims=0),
      node("Reshape", ["x", "m"], ["y"], name="r")], [], r"Reshape 'r'.*computed at run time"),
    # a Trilu of a symbolic square
    ([node("MatMul", ["x", "xt"], ["sq"]), node("Transpose", ["x"], ["xt"], perm=[1, 0]),
      node("Trilu", ["sq"], ["y"], name="t")], [], r"Trilu 't'.*only where these sizes are static"),
])
def test_what_stays_unsupported_names_the_node(nodes, inits, match):
    nodes = sorted(nodes, key=lambda n: n.op_type != "Transpose")  # producers first
    model = model_of(nodes, [("x", F32, ["n", 3])], ["y"], inits)
    with pytest.raises(OnnxImportError, match=match):
        import_onnx(model, dim_ranges={"n": (1, 1000)})


def test_positions_of_two_unbounded_symbols_ask_for_ranges():
    """arange(past, past + n) read from a table: past + n <= rows has no one narrowing; give the ranges."""
    nodes = [node("Shape", ["cache"], ["s"]), node("Gather", ["s", "zero"], ["past"], axis=0),
             node("Shape", ["x"], ["t"]), node("Gather", ["t", "zero"], ["n"], axis=0),
             node("Add", ["past", "n"], ["end"]), node("Range", ["past", "end", "one"], ["pos"]),
             node("Gather", ["table", "pos"], ["y"], axis=0, name="lookup")]
    table = numpy_helper.from_array(RNG.standard_normal((64, 2)).astype(np.float32), "table")
    model = model_of(nodes, [("cache", F32, ["past", 2]), ("x", F32, ["n", 2])], ["y"],
                     [scalar("zero", 0), scalar("one", 1), table])
    with pytest.raises(OnnxImportError, match=r"Gather 'lookup'.*--dim-range") as err:
        import_onnx(model)
    assert "--dim n=N" in str(err.value) and "--dim past=N" in str(err.value)
    assert_symbolic_matches(model, [{"past": 3, "n": 4}, {"past": 32, "n": 32}],
                            dim_ranges={"past": (1, 32), "n": (1, 32)})


def test_dim_options_are_checked(tmp_path, capsys):
    model = model_of([node("Relu", ["x"], ["y"])], [("x", F32, ["seq", 4])], ["y"])
    with pytest.raises(StitchError, match="'sq', no dynamic dimension"):
        import_onnx(model, dim_ranges={"sq": (1, 4)})
    with pytest.raises(StitchError, match="given both a size"):
        import_onnx(model, dims={"seq": 4}, dim_ranges={"seq": (1, 4)})
    with pytest.raises(StitchError, match="1 <= LOW <= HIGH"):
        import_onnx(model, dim_ranges={"seq": (0, 4)})
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    assert main(["import", str(path), "--dim-range", "seq=4"]) == 2  # bad usage
    assert "--dim-range expects NAME=LOW..HIGH" in capsys.readouterr().err
    assert main(["import", str(path), "--dim-range", "seq=2..9"]) == 0
    assert "func g[seq: 2..9](x: f32[seq, 4]) -> f32[seq, 4]" in capsys.readouterr().out


# -- the formulas themselves ----------------------------------------------------------------------------


def test_a_concat_that_continues_a_progression_is_one():
    n = dims.symbol("n")
    arange = lz.Lazy("i64", (n,), lz.obj(np.array([0])), ((0, lz.obj(np.array([1]))),))
    shifted = lz.concat([lz.lift(np.array([-1], np.int64)), arange], 0)
    assert shifted.shape == (n + 1,) and list(shifted.values.flat) == [-1]
    with pytest.raises(lz.NotLazy):
        lz.concat([lz.lift(np.array([5], np.int64)), arange], 0)


def test_comparisons_are_decided_only_when_they_hold_for_every_value():
    p = dims.symbol("p")
    keys = lz.Lazy("i64", (p + 1,), lz.obj(np.array([0])), ((0, lz.obj(np.array([1]))),))
    query = lz.Lazy("i64", (), lz.obj(np.array(p, dtype=object)))
    ranges = {"p": (1, 100)}
    assert lz.compare("LessOrEqual", keys, query, ranges).values.flat[0] is np.True_ or \
        bool(lz.compare("LessOrEqual", keys, query, ranges).values.flat[0])
    with pytest.raises(lz.NotLazy):
        lz.compare("Less", keys, query, ranges)  # false at the last key only


# -- the dynamic-axis exports ---------------------------------------------------------------------------

FIXTURES = sorted(p.stem for p in DYNAMIC.glob("*.onnx"))


def stored(name: str) -> dict[str, tuple[dict, dict]]:
    """{'seq=7': ({input: array}, {output: array})} from the fixture's npz."""
    out: dict[str, tuple[dict, dict]] = {}
    with np.load(DYNAMIC / f"{name}.npz") as data:
        for key in data.files:
            size, _, rest = key.partition("/")
            feeds, outputs = out.setdefault(size, ({}, {}))
            if rest.startswith("output:"):
                outputs[rest.removeprefix("output:")] = data[key]
            else:
                feeds[rest] = data[key]
    return out


def test_the_dynamic_fixtures_are_there():
    assert FIXTURES == ["gpt2_model_dynamic_batch_seq-dynamo", "gpt2_model_dynamic_seq-dynamo",
                        "gpt2_model_dynamic_seq-torchscript", "gpt2_step_dynamic_past-dynamo",
                        "gpt2_step_dynamic_past-torchscript"]


# The ranges a fixture is imported with: an ONNX model holds no range, and two symbols at the IR's default
# range make a tensor of batch * seq elements too large to address (a clear error, tested below).
RANGES = {"gpt2_model_dynamic_batch_seq-dynamo": {"batch": (1, 8)}}
HEADERS = {"gpt2_model_dynamic_batch_seq": "[batch: 1..8, seq: 1..64]", "gpt2_model_dynamic_seq": "[seq: 1..64]",
           "gpt2_step_dynamic_past": "[past: 1..63]"}


@pytest.mark.parametrize("name", FIXTURES)
def test_a_dynamic_export_imports_once_and_matches_onnxruntime_at_every_size(name):
    imported = import_onnx(DYNAMIC / f"{name}.onnx", dim_ranges=RANGES.get(name))
    assert f"func main_graph{HEADERS[name.rsplit('-', 1)[0]]}(" in imported.text
    graph = next(iter(check_program(imported.program).values()))
    sizes = stored(name)
    assert len(sizes) >= 2
    for size, (feeds, want) in sizes.items():
        inputs = {imported.inputs[k]: v for k, v in feeds.items()} | imported.weights
        with np.errstate(all="ignore"):
            got = evaluate(graph, inputs)
        for g, o in zip(got, imported.outputs, strict=True):
            assert g.shape == want[o].shape, (size, o)
            np.testing.assert_allclose(g, want[o], rtol=1e-3, atol=1e-4, err_msg=f"{name} {size} {o}")


@pytest.mark.parametrize("name", FIXTURES)
def test_dim_fixes_a_dynamic_export_to_a_static_import(name):
    size, (feeds, want) = next(iter(stored(name).items()))
    fixed = {symbol: int(value) for symbol, value in (part.split("=") for part in size.split(","))}
    imported = import_onnx(DYNAMIC / f"{name}.onnx", dims=fixed)
    graph = next(iter(check_program(imported.program).values()))
    assert not graph.symbols and "positions" not in imported.text
    with np.errstate(all="ignore"):
        got = evaluate(graph, {imported.inputs[k]: v for k, v in feeds.items()} | imported.weights)
    for g, o in zip(got, imported.outputs, strict=True):
        np.testing.assert_allclose(g, want[o], rtol=1e-3, atol=1e-4)


def test_two_symbols_at_the_default_range_are_refused_naming_the_range_option():
    """Issue 44: batch * seq elements at the IR's default ranges (2**31 - 1 each) is past what stitch
    addresses; the error says which option bounds them."""
    with pytest.raises(StitchError, match="batch \\* seq elements .* --dim-range"):
        import_onnx(DYNAMIC / "gpt2_model_dynamic_batch_seq-dynamo.onnx")
