"""The ONNX ops stitch imports, one table (onnx_math.py: arithmetic to activations; onnx_nn.py: network
layers; onnx_movement.py: data movement), and the translation of one node: evaluated at import time
when its inputs are all known, carried as a formula when they are shapes or positions of symbolic
dimensions (onnx_shapes.py), else emitted through its converter.
"""

from __future__ import annotations

import numpy as np

from .onnx_builder import FOLD_LIMIT, NOT_FOLDED, Builder, Known, Node, Unsupported, Value, invalid
from .onnx_math import MATH_CONVERTERS
from .onnx_movement import MOVEMENT_CONVERTERS, NUMPY_FOLDERS
from .onnx_nn import NN_CONVERTERS
from .onnx_quant import QUANT_CONVERTERS, QUANT_MICROSOFT_CONVERTERS
from .onnx_quantized import MICROSOFT_CONVERTERS
from .onnx_shapes import RULES, shape_rule

CONVERTERS = {**MATH_CONVERTERS, **NN_CONVERTERS, **MOVEMENT_CONVERTERS, **QUANT_CONVERTERS}
MICROSOFT_CONVERTERS = {**MICROSOFT_CONVERTERS, **QUANT_MICROSOFT_CONVERTERS}
NOT_FOLDED.update(QUANT_CONVERTERS)  # a quantized weight stays packed: never dequantized at import time


def translate(b: Builder, proto, ins: list[Value | None]) -> list[Value]:
    """The output values of one node: evaluated now when its inputs are all known, else emitted."""
    if proto.domain == "com.microsoft" and proto.op_type in MICROSOFT_CONVERTERS:
        node = Node(proto, b.opset)
        return MICROSOFT_CONVERTERS[proto.op_type](b, node, ins)
    if proto.domain not in ("", "ai.onnx"):
        raise Unsupported("op", f"op domain '{proto.domain}' (stitch imports the default ONNX domain and "
                                f"com.microsoft's {', '.join(MICROSOFT_CONVERTERS)})")
    node = Node(proto, b.opset)
    check_schema(node, ins)
    convert = CONVERTERS.get(node.op_type)
    if foldable(node, ins):
        try:
            return fold(node, ins)
        except Exception as err:
            if convert is None:
                raise Unsupported("op", f"{node.op_type} failed at import time ({err})") from None
    carried = shape_rule(b, node, ins)
    if carried is not None:
        return carried
    if convert is None:
        raise Unsupported("op", f"stitch has no translation for {node.op_type}")
    results = convert(b, node, ins)
    if any(o and k >= len(results) for k, o in enumerate(proto.output)):
        raise Unsupported("op", f"{node.op_type} output {len(results)} ('{proto.output[len(results)]}') "
                                "is not supported")
    return results


def check_schema(node: Node, ins: list[Value | None]) -> None:
    """The node against its operator's schema at the model's opset: required inputs given, attributes
    the op has, each of the kind the specification says (an `axis` that is a list is an invalid model,
    not a crash in a converter). Ops onnx does not know are left to the converters (unsupported)."""
    from onnx import AttributeProto, defs

    try:
        schema = defs.get_schema(node.op_type, max(node.opset, 1), "")
    except Exception:
        if defs.has(node.op_type):  # an op of a later opset than the model's
            first = min(s.since_version for s in defs.get_all_schemas_with_history()
                        if s.name == node.op_type and s.domain == "")
            raise invalid(f"{node.op_type} does not exist at the model's opset {node.opset} (ONNX added it in "
                          f"opset {first})") from None
        return
    if len(ins) > schema.max_input:
        raise invalid(f"{node.op_type} takes at most {schema.max_input} input(s) at opset {node.opset}, got "
                      f"{len(ins)}")
    for k, formal in enumerate(schema.inputs):
        if formal.option == defs.OpSchema.FormalParameterOption.Single and (k >= len(ins) or ins[k] is None):
            raise invalid(f"{node.op_type} needs its input {k} ('{formal.name}')")
    kinds = AttributeProto.AttributeType.Name
    for a in node.proto.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            raise invalid(f"{node.op_type} has no attribute '{a.name}'")
        if a.type != int(spec.type):
            raise invalid(f"{node.op_type}'s attribute '{a.name}' is {kinds(a.type)}, the specification says "
                          f"{kinds(int(spec.type))}")
    missing = [name for name, spec in schema.attributes.items() if spec.required and name not in node.attrs]
    if missing:
        raise invalid(f"{node.op_type} needs the attribute '{missing[0]}'")


def is_supported(proto) -> bool:
    if proto.domain == "com.microsoft":
        return proto.op_type in MICROSOFT_CONVERTERS
    return proto.domain in ("", "ai.onnx") and (proto.op_type in CONVERTERS or proto.op_type in RULES)


def foldable(node: Node, ins: list[Value | None]) -> bool:
    """Inputs all known, and no weight among them: evaluate at import time. An initializer of integers or
    bools, or of at most FOLD_LIMIT elements, is no weight here (the exporters keep shape arithmetic's
    constants and position buffers as initializers); float tensors stay parameters a user may replace."""
    given = [i for i in ins if i is not None]
    subgraphs = any(a.type in (a.GRAPH, a.GRAPHS) for a in node.proto.attribute)  # they read outer values
    return bool(given) and not subgraphs and node.op_type not in NOT_FOLDED and all(
        isinstance(i, Known) and not is_weight(i) for i in given)


def is_weight(v: Known) -> bool:
    return bool(v.param) and v.array.dtype.kind not in "iub" and v.array.size > FOLD_LIMIT


def fold(node: Node, ins: list[Value | None]) -> list[Value]:
    """Evaluate the node with onnx's reference evaluator, at the model's opset (with numpy where it is wrong)."""
    from onnx import ValueInfoProto, helper
    from onnx.reference import ReferenceEvaluator

    outputs = [o for o in node.proto.output if o]
    if node.op_type in NUMPY_FOLDERS:
        arrays = NUMPY_FOLDERS[node.op_type](node, [None if v is None else v.array for v in ins])
        return [Known(np.asarray(a), name=name) for a, name in zip(arrays, outputs)]
    feeds = {name: v.array for name, v in zip(node.proto.input, ins) if name and v is not None}
    graph = helper.make_graph([node.proto], "fold", [ValueInfoProto(name=n) for n in feeds],
                              [ValueInfoProto(name=o) for o in node.proto.output if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", node.opset)])
    outs = ReferenceEvaluator(model).run(None, feeds)
    return [Known(np.asarray(o), name=name) for o, name in zip(outs, [o for o in node.proto.output if o])]
