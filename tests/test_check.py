"""The checker: generated programs type-check, and the types it infers are what numpy computes."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from stitch.engine.ir.check import (
    AttrProblem,
    broadcast_shapes,
    check_func,
    concat_shape,
    gather_shape,
    matmul_shape,
    normalize_axes,
    normalize_slice,
)
from stitch.engine.ir.errors import StitchError
from stitch.engine.ir.graph import Graph, Node
from stitch.engine.ir.interp import evaluate, np_dtype
from stitch.engine.ir.parse import parse_program
from stitch.engine.ir.program import TensorType
from stitch_testing import inputs_for, program_and_inputs, programs

# Every dtype, f32 still the usual one.
DTYPES = ("f32", "f64", "f16", "i32", "i64", "bool")


@given(programs(dtypes=DTYPES, max_funcs=2))
def test_generated_programs_check(program):
    assert_checks(program)


@given(programs(dtypes=DTYPES, max_funcs=2, movement=True))
def test_generated_programs_with_movement_ops_check(program):
    assert_checks(program)


def assert_checks(program):
    for func in program.funcs:
        graph = check_func(func)
        assert graph.output_types == list(func.results)
        assert [n.id for n in graph.nodes] == list(range(len(graph.nodes)))
        assert all(i < n.id for n in graph.nodes for i in n.inputs), "nodes are not in topological order"


@given(programs(dtypes=DTYPES, max_rank=4, max_dim=4, max_ops=12), st.data())
def test_inferred_types_are_what_numpy_computes(program, data):
    assert_types_are_numpys(program, data)


@given(programs(dtypes=DTYPES, max_rank=4, max_dim=4, max_ops=12, movement=True), st.data())
def test_inferred_types_with_movement_ops_are_what_numpy_computes(program, data):
    assert_types_are_numpys(program, data)


def assert_types_are_numpys(program, data):
    graph = check_func(program.funcs[0])
    inputs = data.draw(inputs_for(graph))
    for node, value in zip(graph.nodes, natural_values(graph, inputs)):
        where = f"node {node.id} ({node.op}): numpy gives {value.dtype}{list(value.shape)}, the checker {node.type}"
        assert value.shape == node.type.shape, where
        assert value.dtype == np_dtype(node.type.dtype), where


@given(program_and_inputs(dtypes=DTYPES))
def test_interpreter_outputs_have_the_declared_types(case):
    assert_declared_types(case)


@given(program_and_inputs(dtypes=DTYPES, movement=True))
def test_interpreter_outputs_have_the_declared_types_with_movement_ops(case):
    assert_declared_types(case)


def assert_declared_types(case):
    program, inputs = case
    func = program.funcs[0]
    outputs = evaluate(check_func(func), inputs)
    assert len(outputs) == len(func.results)
    for out, declared in zip(outputs, func.results):
        assert out.shape == declared.shape
        assert out.dtype == np_dtype(declared.dtype)


def natural_values(graph: Graph, inputs: dict) -> list[np.ndarray]:
    """Every node's value as plain numpy computes it, with no dtype forced on the result.

    The one deliberate departure from numpy: integer sums keep their dtype
    (numpy would widen i32 to i64), as the checker and interpreter document.
    """
    values: list[np.ndarray] = []
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            args = [values[i] for i in node.inputs]
            values.append(np.asarray(natural(node, args, inputs)))
    return values


def natural(node: Node, args: list[np.ndarray], inputs: dict):
    op = node.op
    if op == "param":
        return inputs[node.name]
    if op == "const":  # the checker decides a literal's dtype; its uses are what is tested
        return np.asarray(node.attr("value"), dtype=np_dtype(node.type.dtype))
    ufuncs = {
        "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "tanh": np.tanh,
        "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "pow": np.power,
        "maximum": np.maximum, "minimum": np.minimum, "less": np.less, "greater": np.greater, "equal": np.equal,
        "matmul": np.matmul, "where": np.where, "bitand": np.bitwise_and, "bitor": np.bitwise_or,
        "bitxor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift,
    }  # fmt: skip
    if op in ufuncs:
        return ufuncs[op](*args)
    if op == "iota":
        return np.indices(node.attr("shape"), dtype=np_dtype(node.attr("dtype")))[node.attr("axis")]
    x = args[0]
    if op == "rsqrt":
        return 1 / np.sqrt(x)
    if op == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if op == "relu":
        return np.maximum(x, 0)
    if op == "erf":
        return np.vectorize(math.erf, otypes=[x.dtype])(x)
    if op == "sum":
        keep_int = {"dtype": x.dtype} if x.dtype.kind in "iu" else {}
        return np.sum(x, axis=node.attr("axes"), keepdims=node.attr("keepdims"), **keep_int)
    if op in ("mean", "max", "min"):
        fn = {"mean": np.mean, "max": np.max, "min": np.min}[op]
        return fn(x, axis=node.attr("axes"), keepdims=node.attr("keepdims"))
    if op == "transpose":
        return np.transpose(x, node.attr("perm"))
    if op == "reshape":
        return np.reshape(x, node.attr("shape"))
    if op == "broadcast_to":
        return np.broadcast_to(x, node.attr("shape"))
    if op == "slice":
        index = [slice(None)] * x.ndim
        for a, start, end, step in zip(*(node.attr(k) for k in ("axes", "starts", "ends", "steps"))):
            index[a] = slice(start, end, step)
        return x[tuple(index)]
    if op == "concat":
        return np.concatenate(args, axis=node.attr("axis"))
    if op == "gather":
        return np.take(x, args[1], axis=node.attr("axis"))
    assert op == "cast", op
    return x.astype(np_dtype(node.attr("dtype")))


# -- broadcast_shapes ------------------------------------------------------------

small_shapes = st.lists(st.integers(1, 4), max_size=4).map(tuple)


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((), (), ()),
        ((3,), (), (3,)),
        ((1,), (5,), (5,)),
        ((2, 1, 4), (3, 1), (2, 3, 4)),
        ((4, 1), (1, 4), (4, 4)),
        ((2,), (3,), None),
        ((2, 3), (3, 3, 2), None),
    ],
)
def test_broadcast_shapes_table(a, b, expected):
    assert broadcast_shapes(a, b) == expected
    assert broadcast_shapes(b, a) == expected


@given(hnp.mutually_broadcastable_shapes(num_shapes=2, min_side=1, max_dims=5))
def test_broadcast_shapes_matches_numpy_when_they_broadcast(shapes):
    assert broadcast_shapes(*shapes.input_shapes) == shapes.result_shape


@given(small_shapes, small_shapes)
def test_broadcast_shapes_matches_numpy(a, b):
    try:
        expected = np.broadcast_shapes(a, b)
    except ValueError:
        expected = None
    assert broadcast_shapes(a, b) == expected


# -- matmul_shape -------------------------------------------------------------------


@pytest.mark.parametrize(
    "a, b, expected",
    [
        ((2, 3), (3, 4), (2, 4)),
        ((3,), (3, 4), (4,)),
        ((2, 3), (3,), (2,)),
        ((3,), (3,), ()),
        ((5, 2, 3), (3, 4), (5, 2, 4)),
        ((5, 1, 2, 3), (6, 3, 4), (5, 6, 2, 4)),
        ((3,), (7, 3, 4), (7, 4)),
    ],
)
def test_matmul_shape_table(a, b, expected):
    assert matmul_shape(a, b) == expected


@pytest.mark.parametrize("a, b", [((), (3,)), ((3,), ()), ((2, 3), (4, 2)), ((3,), (4,)), ((2, 2, 3), (3, 3, 4))])
def test_matmul_shape_errors(a, b):
    assert isinstance(matmul_shape(a, b), str)


@given(hnp.mutually_broadcastable_shapes(signature="(m?,n),(n,p?)->(m?,p?)", min_side=1, max_dims=3))
def test_matmul_shape_matches_numpy_when_valid(shapes):
    assert matmul_shape(*shapes.input_shapes) == shapes.result_shape


@given(small_shapes, small_shapes)
def test_matmul_shape_matches_numpy(a, b):
    try:
        expected = np.matmul(np.zeros(a), np.zeros(b)).shape
    except ValueError:
        assert isinstance(matmul_shape(a, b), str)
    else:
        assert matmul_shape(a, b) == expected


# -- normalize_axes -------------------------------------------------------------------


@pytest.mark.parametrize(
    "axes, rank, expected",
    [((0,), 3, (0,)), ((-1, 0), 3, (0, 2)), ((2, 1, 0), 3, (0, 1, 2)), ((), 2, ()), ((), 0, ()), ((-3,), 3, (0,))],
)
def test_normalize_axes(axes, rank, expected):
    assert normalize_axes(axes, rank) == expected


@pytest.mark.parametrize("axes, rank", [((3,), 3), ((-4,), 3), ((0,), 0), ((1, -2), 3), ((0, 0), 1)])
def test_normalize_axes_errors(axes, rank):
    assert isinstance(normalize_axes(axes, rank), str)


@given(st.data(), st.integers(1, 5))
def test_normalize_axes_accepts_any_spelling(data, rank):
    chosen = data.draw(st.sets(st.integers(0, rank - 1)))
    spelled = [a - rank if data.draw(st.booleans()) else a for a in chosen]
    spelled = data.draw(st.permutations(spelled))
    assert normalize_axes(spelled, rank) == tuple(sorted(chosen))


# -- targeted inference ---------------------------------------------------------------------


def graph_of(expr: str, **params: str) -> tuple[Graph, Node]:
    """The checked graph of a func with the given parameters that binds `y = expr`, and y's node."""
    sig = ", ".join(f"{name}: {t}" for name, t in params.items())
    first, first_type = next(iter(params.items()))
    program = parse_program(f"func f({sig}) -> {first_type} {{\n  y = {expr}\n  return {first}\n}}\n")
    graph = check_func(program.funcs[0], program.source)
    return graph, next(n for n in graph.nodes if n.name == "y")


def node_of(expr: str, **params: str) -> Node:
    return graph_of(expr, **params)[1]


def type_of(expr: str, **params: str) -> TensorType:
    return node_of(expr, **params).type


def t(text: str) -> TensorType:
    dtype, dims = text.rstrip("]").split("[")
    return TensorType(dtype, tuple(int(d) for d in dims.split(",") if d.strip()))


@pytest.mark.parametrize(
    "shape, expected",
    [("[-1, 4]", "f32[6, 4]"), ("[2, -1]", "f32[2, 12]"), ("[-1]", "f32[24]"), ("[1, -1, 1]", "f32[1, 24, 1]"),
     ("[4, 3, 2]", "f32[4, 3, 2]")],
)  # fmt: skip
def test_reshape_resolves_minus_one(shape, expected):
    node = node_of(f"reshape(x, shape={shape})", x="f32[2, 3, 4]")
    assert node.type == t(expected)
    assert node.attr("shape") == t(expected).shape


def test_reshape_of_a_scalar():
    assert type_of("reshape(x, shape=[-1])", x="i32[]") == t("i32[1]")
    assert type_of("reshape(x, shape=[])", x="i32[1, 1]") == t("i32[]")


@pytest.mark.parametrize("shape", ["[-1, -1]", "[5, -1]", "[0, -1]", "[-2, 12]", "[5, 5]", "[]"])
def test_bad_reshapes_are_rejected(shape):
    with pytest.raises(StitchError):
        type_of(f"reshape(x, shape={shape})", x="f32[2, 3, 4]")


@pytest.mark.parametrize(
    "expr, expected, axes",
    [
        ("sum(x)", "f32[]", (0, 1, 2)),
        ("sum(x, keepdims=true)", "f32[1, 1, 1]", (0, 1, 2)),
        ("mean(x, axes=[-1])", "f32[2, 3]", (2,)),
        ("max(x, axes=[-1, 0], keepdims=true)", "f32[1, 3, 1]", (0, 2)),
        ("min(x, axes=[1], keepdims=false)", "f32[2, 4]", (1,)),
        ("sum(x, axes=[])", "f32[2, 3, 4]", ()),
    ],
)
def test_reductions(expr, expected, axes):
    node = node_of(expr, x="f32[2, 3, 4]")
    assert node.type == t(expected)
    assert node.attr("axes") == axes


def test_integer_sum_keeps_its_dtype():
    assert type_of("sum(x, axes=[0])", x="i32[5, 2]") == t("i32[2]")


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("transpose(x)", "f32[4, 3, 2]"),
        ("transpose(x, perm=[1, 2, 0])", "f32[3, 4, 2]"),
        ("broadcast_to(x, shape=[5, 2, 3, 4])", "f32[5, 2, 3, 4]"),
        ("cast(x, dtype=i64)", "i64[2, 3, 4]"),
        ("less(x, 1.0)", "bool[2, 3, 4]"),
        ("equal(x, transpose(x, perm=[0, 1, 2]))", "bool[2, 3, 4]"),
        ("where(greater(x, 1.0), x, 0.0)", "f32[2, 3, 4]"),
        ("where(true, 1.0, x)", "f32[2, 3, 4]"),
        ("add(x, reshape(x, shape=[6, 1, 1, 4]))", "f32[6, 2, 3, 4]"),
        ("matmul(x, reshape(sum(x, axes=[0, 1]), shape=[4]))", "f32[2, 3]"),
        ("matmul(reshape(sum(x, axes=[0, 2]), shape=[3]), x)", "f32[2, 4]"),
    ],
)
def test_inferred_types(expr, expected):
    assert type_of(expr, x="f32[2, 3, 4]") == t(expected)


@pytest.mark.parametrize(
    "expr, params, literal",
    [
        ("add(i, 2)", {"i": "i32[3]"}, ("i32", 2)),
        ("add(i, 2.0)", {"i": "i64[3]"}, ("i64", 2)),
        ("add(x, 2)", {"x": "f16[3]"}, ("f16", 2.0)),
        ("sub(1, x)", {"x": "f64[3]"}, ("f64", 1.0)),
        ("where(b, 1, i)", {"b": "bool[3]", "i": "i32[3]"}, ("i32", 1)),
    ],
)
def test_literals_take_the_other_operands_dtype(expr, params, literal):
    graph, node = graph_of(expr, **params)
    (const,) = [graph.nodes[i] for i in node.inputs if graph.nodes[i].op == "const"]
    dtype, value = literal
    assert const.type == TensorType(dtype, ())
    assert const.attr("value") == value and type(const.attr("value")) is type(value)


@pytest.mark.parametrize(
    "expr",
    [
        "add(x, d)",  # f32 vs f64
        "where(x, x, x)",  # condition not bool
        "exp(i)",  # float-only op on ints
        "sum(b)",  # numeric op on bool
        "less(b, b)",  # compare needs numbers
        "add(i, 2.5)",  # non-integral literal in an int context
        "add(b, true)",  # add is not defined on bool
        "add(x, transpose(x))",  # [2, 3] vs [3, 2]
        "matmul(x, x)",  # inner dimensions differ
        "mean(i)",  # mean is float-only
        "transpose(x, perm=[0, 0])",
        "broadcast_to(x, shape=[3, 3])",
        "sum(x, axes=[2])",
        "cast(x, dtype=f8)",
        "add(i, 3000000000)",  # does not fit in i32
    ],
)
def test_ill_typed_calls_are_rejected(expr):
    with pytest.raises(StitchError):
        type_of(expr, x="f32[2, 3]", d="f64[2, 3]", i="i32[2, 3]", b="bool[2, 3]")


# -- slice, concat, gather -------------------------------------------------------------


@given(st.lists(st.integers(1, 6), min_size=1, max_size=3), st.data())
def test_slice_normal_form_is_numpys_basic_slicing(shape, data):
    """normalize_slice gives what x[start:end:step] reads, in normal form; an empty result is an error."""
    rank = len(shape)
    axes = data.draw(st.lists(st.integers(-rank, rank - 1), unique_by=lambda a: a % rank, max_size=rank))
    starts = [data.draw(st.integers(-9, 9)) for _ in axes]
    ends = [data.draw(st.integers(-9, 9) | st.just(2**31 - 1)) for _ in axes]
    steps = [data.draw(st.integers(1, 4)) for _ in axes]
    x = np.arange(math.prod(shape)).reshape(shape)
    index = [slice(None)] * rank
    for a, start, end, step in zip(axes, starts, ends, steps):
        index[a] = slice(start, end, step)
    expected = x[tuple(index)]
    if expected.size == 0:
        with pytest.raises(AttrProblem, match="empty"):
            normalize_slice(tuple(shape), axes, starts, ends, steps)
        return
    (n_axes, n_starts, n_ends, n_steps), out = normalize_slice(tuple(shape), axes, starts, ends, steps)
    assert out == expected.shape
    assert list(n_axes) == sorted(a % rank for a in axes)
    normal = [slice(None)] * rank
    for a, start, end, step in zip(n_axes, n_starts, n_ends, n_steps):
        assert 0 <= start <= end <= shape[a] and step >= 1
        assert -(-(end - start) // step) == out[a] > 0
        normal[a] = slice(start, end, step)
    assert np.array_equal(x[tuple(normal)], expected)


def test_slice_steps_default_to_one():
    node = node_of("slice(x, axes=[-1, 0], starts=[-3, 1], ends=[100, 2])", x="f32[2, 3, 4]")
    assert node.type == t("f32[1, 3, 3]")
    assert node.attrs == (("axes", (0, 2)), ("starts", (1, 1)), ("ends", (2, 4)), ("steps", (1, 1)))


def test_slice_of_nothing_is_the_identity():
    node = node_of("slice(x, axes=[], starts=[], ends=[])", x="f32[2, 3]")
    assert node.type == t("f32[2, 3]") and node.attr("axes") == ()


@pytest.mark.parametrize(
    "expr, expected, axis",
    [
        ("concat(x, axis=0)", "f32[2, 3, 4]", 0),
        ("concat(x, x, axis=-1)", "f32[2, 3, 8]", 2),
        ("concat(x, sum(x, axes=[1], keepdims=true), x, axis=1)", "f32[2, 7, 4]", 1),
        ("gather(x, i, axis=1)", "f32[2, 5, 2, 4]", 1),
        ("gather(x, j, axis=-1)", "f32[2, 3]", 2),
        ("gather(x, 1, axis=0)", "f32[3, 4]", 0),
        ("gather(x, -1, axis=2)", "f32[2, 3]", 2),
        ("gather(gather(x, i, axis=0), j, axis=0)", "f32[2, 3, 4]", 0),
    ],
)
def test_concat_and_gather_types(expr, expected, axis):
    node = node_of(expr, x="f32[2, 3, 4]", i="i32[5, 2]", j="i64[]")
    assert node.type == t(expected)
    assert node.attrs == (("axis", axis),)


def test_gather_literal_index_is_i32():
    graph, node = graph_of("gather(x, 2, axis=0)", x="f32[4]")
    assert graph.nodes[node.inputs[1]].type == t("i32[]")


@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.lists(st.integers(1, 3), max_size=2), st.data())
def test_gather_shape_is_np_takes(shape, index_shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    expected = np.take(np.zeros(shape), np.zeros(index_shape, dtype=np.int64), axis=axis).shape
    assert gather_shape(tuple(shape), tuple(index_shape), axis) == (axis % len(shape), expected)


def test_concat_shape_names_the_bad_operand():
    assert concat_shape([(2, 3), (4, 3), (1, 3)], -2) == (0, (7, 3))
    with pytest.raises(AttrProblem) as err:
        concat_shape([(2, 3), (2, 3), (2, 4)], 0)
    assert err.value.where == 2
    with pytest.raises(AttrProblem) as err:
        concat_shape([(2, 3), (2, 3)], 2)
    assert err.value.where == "axis"
