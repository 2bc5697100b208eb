"""ONNX data movement: Gather, GatherElements, GatherND, Slice, Split, Concat, Trilu, Pad, Tile, CumSum against onnx's reference
evaluator (numpy where the evaluator is wrong), in every form: run-time and known positions, weights, folding."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from onnx import (  # noqa: E402
    TensorProto,
    helper,
    numpy_helper,  # noqa: E402
)
from onnx.reference import ReferenceEvaluator  # noqa: E402
from stitch.engine.ir.check import check_program  # noqa: E402
from stitch.engine.ir.interp import evaluate  # noqa: E402
from stitch.frontends.onnx_import import OnnxImportError, import_onnx  # noqa: E402

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
BIG = 2 ** 63 - 1
RNG = np.random.default_rng(7)


def x_of(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def model_of(nodes, inputs, outputs, initializers=(), opset=21):
    vi = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    vo = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    graph = helper.make_graph(nodes, "g", vi, vo, [numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_imported(model, feeds, **kwargs):
    imported = import_onnx(model, **kwargs)
    assert imported.program == imported.checked  # the text parses back to the program the import checked
    graph = next(iter(check_program(imported.program).values()))
    inputs = {imported.inputs[k]: v for k, v in feeds.items() if k in imported.inputs}
    return evaluate(graph, inputs | imported.weights)


def assert_matches_onnx(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    got = run_imported(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def ops_of(imported) -> list[str]:
    graph = next(iter(check_program(imported.program).values()))
    return [n.op for n in graph.nodes if n.op not in ("param", "const")]


# -- Gather ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("axis,indices", [(0, [[0, 2], [-1, 1]]), (1, [3, -4, 0]), (-1, [1])])
def test_gather_at_run_time(axis, indices):
    idx = np.array(indices, np.int64)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)
    model = model_of([node], [("x", F32, [3, 4, 5]), ("i", I64, list(idx.shape))], [("y", F32, None)])
    assert_matches_onnx(model, {"x": x_of(3, 4, 5), "i": idx})
    assert "gather" in ops_of(import_onnx(model))


@pytest.mark.parametrize("indices,op", [(np.array(2), "slice"), (np.array([1, 2, 3]), "slice"),
                                        (np.array([0, 2]), "slice"), (np.array([3, 0, 0]), "gather"),
                                        (np.array([[1, -1]]), "gather"), (np.array(-1), "slice")])
def test_gather_at_known_positions_is_a_slice_or_a_gather_of_an_index_weight(indices, op):
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    model = model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], [("i", indices.astype(np.int64))])
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})
    assert op in ops_of(import_onnx(model))


def test_a_weight_read_at_known_positions_becomes_a_smaller_weight():
    table = x_of(64, 8)
    nodes = [helper.make_node("Gather", ["table", "pos"], ["p"]), helper.make_node("Add", ["x", "p"], ["y"])]
    model = model_of(nodes, [("x", F32, [4, 8])], [("y", F32, None)],
                     [("table", table), ("pos", np.array([5, 6, 7, 8], np.int64))])
    imported = import_onnx(model)
    assert [w.shape for w in imported.weights.values()] == [(4, 8)]
    np.testing.assert_array_equal(next(iter(imported.weights.values())), table[5:9])
    assert ops_of(imported) == ["add"]


def test_gather_of_known_data_and_indices_folds():
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "k"], ["d"]),
             helper.make_node("Unsqueeze", ["d", "zero"], ["u"]),
             helper.make_node("Concat", ["u", "minus"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = model_of(nodes, [("x", F32, [3, 4, 5])], [("y", F32, None)],
                     [("k", np.array(0, np.int64)), ("zero", np.array([0], np.int64)),
                      ("minus", np.array([-1], np.int64))])
    imported = import_onnx(model)
    assert ops_of(imported) == ["reshape"] and imported.program.funcs[0].results[0].shape == (3, 20)


def test_gather_index_out_of_range_is_an_invalid_model():
    node = helper.make_node("Gather", ["x", "i"], ["y"], name="g")
    model = model_of([node], [("x", F32, [3, 4])], [("y", F32, None)], [("i", np.array([3], np.int64))])
    with pytest.raises(OnnxImportError, match="Gather 'g': invalid model: an index is out of range"):
        import_onnx(model)


# -- Slice -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], None, None), ([0, 1], [BIG, -1], [0, 2], None), ([-3], [BIG], [-1], [2]), ([-100], [100], [1], None),
    ([2, 4], [0, -BIG], [0, 1], [-1, -2]), ([3], [-BIG], [2], [-1]), ([0, 1, 0], [2, 3, 5], [0, 1, 2], [1, 1, 3]),
])
def test_slice_every_form(starts, ends, axes, steps):
    arrays = [("starts", np.array(starts, np.int64)), ("ends", np.array(ends, np.int64))]
    if axes is not None:
        arrays.append(("axes", np.array(axes, np.int64)))
    if steps is not None:
        if axes is None:
            arrays.append(("axes", np.arange(len(starts), dtype=np.int64)))
        arrays.append(("steps", np.array(steps, np.int64)))
    node = helper.make_node("Slice", ["x"] + [n for n, _ in arrays], ["y"])
    model = model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], arrays, opset=13)
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})


def test_slice_with_attributes_before_opset_10():
    node = helper.make_node("Slice", ["x"], ["y"], starts=[1, -2], ends=[BIG, 4], axes=[0, 2])
    assert_matches_onnx(model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], opset=9),
                        {"x": x_of(3, 4, 5)})


def test_slice_of_a_weight_is_a_smaller_weight_and_an_empty_slice_is_refused():
    nodes = [helper.make_node("Slice", ["w", "s", "e"], ["p"]), helper.make_node("Add", ["x", "p"], ["y"])]
    inits = [("w", x_of(10, 4)), ("s", np.array([2], np.int64)), ("e", np.array([5], np.int64))]
    imported = import_onnx(model_of(nodes, [("x", F32, [3, 4])], [("y", F32, None)], inits))
    assert [w.shape for w in imported.weights.values()] == [(3, 4)]
    empty = [("w", x_of(10, 4)), ("s", np.array([5], np.int64)), ("e", np.array([2], np.int64))]
    with pytest.raises(OnnxImportError, match="empty"):
        import_onnx(model_of(nodes[:1], [], [("p", F32, None)], empty))


def test_slice_step_zero_is_an_invalid_model():
    node = helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"], name="z")
    inits = [(n, np.array([v], np.int64)) for n, v in [("s", 0), ("e", 2), ("a", 0), ("st", 0)]]
    with pytest.raises(OnnxImportError, match="Slice 'z': invalid model: a Slice step is 0"):
        import_onnx(model_of([node], [("x", F32, [3])], [("y", F32, None)], inits))


# -- Split and Concat --------------------------------------------------------------------------------------


@pytest.mark.parametrize("opset,attrs,split,outputs", [
    (11, {"axis": 1, "split": [1, 3]}, None, 2), (13, {"axis": -1}, [2, 2, 1], 3), (13, {}, None, 3),
    (18, {"axis": 2, "num_outputs": 3}, None, 3), (18, {"axis": 2, "num_outputs": 2}, None, 2),
])
def test_split_every_form(opset, attrs, split, outputs):
    names = [f"y{k}" for k in range(outputs)]
    inputs = ["x"] + (["split"] if split else [])
    node = helper.make_node("Split", inputs, names, **attrs)
    inits = [("split", np.array(split, np.int64))] if split else []
    model = model_of([node], [("x", F32, [3, 4, 5])], [(n, F32, None) for n in names], inits, opset=opset)
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})


def test_concat_of_run_time_values_weights_and_an_empty_input():
    node = helper.make_node("Concat", ["x", "w", "empty", "x"], ["y"], axis=-2)
    model = model_of([node], [("x", F32, [2, 3])], [("y", F32, None)],
                     [("w", x_of(4, 3)), ("empty", np.zeros((0, 3), np.float32))])
    assert_matches_onnx(model, {"x": x_of(2, 3)})
    assert ops_of(import_onnx(model)) == ["concat"]


def test_concat_of_weights_only_is_one_weight():
    nodes = [helper.make_node("Concat", ["a", "b"], ["c"], axis=0), helper.make_node("Mul", ["x", "c"], ["y"])]
    model = model_of(nodes, [("x", F32, [5])], [("y", F32, None)], [("a", x_of(2)), ("b", x_of(3))])
    imported = import_onnx(model)
    assert [w.shape for w in imported.weights.values()] == [(5,)] and ops_of(imported) == ["mul"]
    assert_matches_onnx(model, {"x": x_of(5)})


# -- GatherElements, GatherND, Trilu ---------------------------------------------------------------------


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_elements_at_run_time_and_known_positions(axis):
    rng = np.random.default_rng(1)
    shape = [3, 4, 5]
    shape[axis] = 2  # (the reference evaluator wants the other dimensions equal to the data's)
    idx = rng.integers(-3, 3, shape).astype(np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)
    runtime = model_of([node], [("x", F32, [3, 4, 5]), ("i", I64, shape)], [("y", F32, None)])
    x = x_of(3, 4, 5)
    assert_matches_onnx(runtime, {"x": x, "i": idx})
    known = model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], [("i", idx)])
    assert_matches_onnx(known, {"x": x})


def test_gather_elements_negative_axis():
    """(onnx's reference evaluator does not normalize a negative axis here: numpy is the reference)."""
    idx = np.array([[0, -1, 2], [1, 1, -3]], np.int64)
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=-1)
    x = x_of(2, 4)
    (got,) = run_imported(model_of([node], [("x", F32, [2, 4]), ("i", I64, [2, 3])], [("y", F32, None)]),
                          {"x": x, "i": idx})
    np.testing.assert_array_equal(got, np.take_along_axis(x, idx % 4, axis=-1))


def test_gather_elements_folds_with_numpy_where_the_reference_evaluator_crashes():
    """onnx 1.23.2's reference GatherElements fails on an axis of length >= 64 (seen on BERT's positions)."""
    data = np.arange(2 * 80, dtype=np.int64).reshape(2, 80)
    idx = np.broadcast_to(np.arange(80)[::-1], (1, 80)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["d", "i"], ["g"], axis=1),
             helper.make_node("Cast", ["g"], ["gf"], to=TensorProto.FLOAT), helper.make_node("Add", ["x", "gf"], ["y"])]
    model = model_of(nodes, [("x", F32, [1, 80])], [("y", F32, None)], [("d", data), ("i", idx)])
    x = x_of(1, 80)
    (got,) = run_imported(model, {"x": x}, fold_constants=False)
    np.testing.assert_allclose(got, x + np.take_along_axis(data[:1], idx, axis=1).astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("indices,batch_dims", [
    (np.array([[0, 1], [2, 3]]), 0), (np.array([[1], [0]]), 0), (np.array([[[0, 1, 2]], [[1, -1, 0]]]), 0),
    (np.array([[1], [2], [0]]), 1),
])
def test_gather_nd_at_known_positions(indices, batch_dims):
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    model = model_of([node], [("x", F32, [3, 4, 5])], [("y", F32, None)], [("i", indices.astype(np.int64))])
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})


@pytest.mark.parametrize("indices,batch_dims", [
    (np.array([[0, 1], [2, -1]]), 0), (np.array([[[1], [0]], [[2], [-3]]]), 0), (np.array([[1, 4], [2, 0], [0, 3]]), 1),
])
def test_gather_nd_at_run_time(indices, batch_dims):
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    model = model_of([node], [("x", F32, [3, 4, 5]), ("i", I64, list(indices.shape))], [("y", F32, None)])
    assert_matches_onnx(model, {"x": x_of(3, 4, 5), "i": indices.astype(np.int64)})
    assert "gather" in ops_of(import_onnx(model))


@pytest.mark.parametrize("upper,k", [(1, 0), (0, 0), (1, 2), (0, -1)])
def test_trilu_of_a_run_time_tensor(upper, k):
    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    model = model_of([node], [("x", F32, [2, 4, 5])], [("y", F32, None)], [("k", np.array(k, np.int64))])
    assert_matches_onnx(model, {"x": x_of(2, 4, 5)})


# -- Pad, Tile, CumSum ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode,pads,axes", [
    ("constant", [1, 0, 2, 0, 3, 1], None),
    ("edge", [2, 1, 0, 0, 3, 2], None), ("reflect", [0, 2, 3, 0], [1, 2]), ("wrap", [1, 0, 2, 3], [2, 1]),
])
def test_pad_every_mode(mode, pads, axes):
    """Swin pads its windows (constant), ConvBERT its span convolution; the others for completeness."""
    inputs = ["x", "pads", "value"] + (["axes"] if axes else [])
    inits = [("pads", np.array(pads, np.int64)), ("value", np.array(0.5, np.float32))]
    inits += [("axes", np.array(axes, np.int64))] if axes else []
    model = model_of([helper.make_node("Pad", inputs, ["y"], mode=mode)], [("x", F32, [3, 4, 5])], [("y", F32, None)],
                     inits, opset=19)
    assert_matches_onnx(model, {"x": x_of(3, 4, 5)})
    assert "concat" in ops_of(import_onnx(model))


def test_negative_pads_crop():
    """(onnx's reference evaluator refuses negative pads: numpy's pad says what the crop and pad make)"""
    model = model_of([helper.make_node("Pad", ["x", "pads", "value", "axes"], ["y"])], [("x", F32, [3, 4, 5])],
                     [("y", F32, None)], [("pads", np.array([-1, 2, 1, -2], np.int64)),
                                          ("value", np.array(0.5, np.float32)), ("axes", np.array([0, -1], np.int64))])
    x = x_of(3, 4, 5)
    (got,) = run_imported(model, {"x": x})
    np.testing.assert_array_equal(got, np.pad(x[1:, :, :-2], ((0, 1), (0, 0), (2, 0)), constant_values=0.5))


def test_pad_by_a_value_given_at_run_time_and_before_opset_11():
    model = model_of([helper.make_node("Pad", ["x", "pads", "v"], ["y"])], [("x", F32, [2, 3]), ("v", F32, [])],
                     [("y", F32, None)], [("pads", np.array([1, 0, 0, 2], np.int64))], opset=18)
    assert_matches_onnx(model, {"x": x_of(2, 3), "v": np.array(-3.0, np.float32)})
    old = model_of([helper.make_node("Pad", ["x"], ["y"], pads=[0, 1, 2, 0], value=2.0)], [("x", F32, [2, 3])],
                   [("y", F32, None)], opset=2)
    assert_matches_onnx(old, {"x": x_of(2, 3)})


@pytest.mark.parametrize("pads,why", [([1, 1], "Pad of 2 pads for axes [0, 1]"),
                                      ([0, 4, 0, 0], "Pad 'reflect' of 4, 0 on an axis of 3")])
def test_pad_that_cannot_be_done_is_refused_clearly(pads, why):
    model = model_of([helper.make_node("Pad", ["x", "pads"], ["y"], mode="reflect")], [("x", F32, [2, 3])],
                     [("y", F32, None)], [("pads", np.array(pads, np.int64))], opset=18)
    with pytest.raises(OnnxImportError) as err:
        import_onnx(model)
    assert why in str(err.value)


@pytest.mark.parametrize("repeats", [[1, 3, 2], [2, 1, 1], [1, 1, 1]])
def test_tile_is_a_broadcast_no_copy(repeats):
    """GPT-J's and DeBERTa's repeats: a reshape, a broadcast_to and a reshape, read as index maps."""
    model = model_of([helper.make_node("Tile", ["x", "r"], ["y"])], [("x", F32, [2, 3, 4])], [("y", F32, None)],
                     [("r", np.array(repeats, np.int64))])
    assert_matches_onnx(model, {"x": x_of(2, 3, 4)})
    assert set(ops_of(import_onnx(model))) <= {"reshape", "broadcast_to"}


@pytest.mark.parametrize("dtype,axis,exclusive,reverse", [
    (np.float32, 1, 0, 0), (np.float32, 0, 1, 1), (np.int64, -1, 1, 0), (np.int32, 1, 0, 1)])
def test_cumsum_is_a_product_with_a_triangle(dtype, axis, exclusive, reverse):
    """MPNet's position ids: the cumsum of the sequence's mask (int32)."""
    x = (RNG.integers(-5, 6, (3, 7)) if dtype != np.float32 else x_of(3, 7)).astype(dtype)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    model = model_of([node], [("x", t, [3, 7])], [("y", t, None)], [("axis", np.array(axis, np.int64))])
    assert_matches_onnx(model, {"x": x})
    assert "matmul" in ops_of(import_onnx(model))
