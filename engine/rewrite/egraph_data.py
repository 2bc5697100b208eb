"""A saturated e-graph read back into Python (from egglog's serialized JSON).

Only the tensor sort `T` is kept as e-classes of e-nodes; primitive children
(op names, axes, dtypes, constants) are resolved to Python values, and the
`shape` and `dtype` analyses are attached to each e-class. Extraction and the
cost model work on this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..ir.frozen import cached_hash
from ..ir.graph import lookup
from ..ir.program import TensorType
from .egraph import FAMILIES, NAMED_FAMILIES, PLACEMENT_CTORS

PLACEMENT_OF = {ctor: name for name, ctor in PLACEMENT_CTORS.items()}


@cached_hash
@dataclass(frozen=True)
class ENode:
    ctor: str  # the egglog constructor: Un, Bin, Red, Global, ...
    op: str  # the stitch op ("add", "sum", ...), "param", "const", or a placement name
    children: tuple[str, ...]  # e-class ids of tensor operands
    attrs: tuple[tuple[str, object], ...] = ()

    @property
    def is_placement(self) -> bool:
        return self.ctor in PLACEMENT_OF

    def attr(self, key: str, default=None):
        return lookup(self.attrs, key, default)


Choice = dict[str, "ENode"]  # e-class id -> the chosen e-node: one program of the e-graph's


@dataclass
class EGraphData:
    classes: dict[str, list[ENode]]
    roots: list[str]
    types: dict[str, TensorType] = field(default_factory=dict)

    @property
    def enode_count(self) -> int:
        return sum(len(v) for v in self.classes.values())

    @classmethod
    def from_json(cls, text: str, roots: list[str] | None = None,
                  exact_ints: dict[tuple[float, str], int] | None = None, decode=None) -> "EGraphData":
        """`exact_ints`: integer literals beyond 2**53 (saturate.exact_int_constants), back from their f64.
        `decode`: how a symbolic program's dimensions read back (symbols.py `Encoding.decoder`: as
        Extents at the symbols' planning values, engine/ir/extent.py); a static program's as they are."""
        decode = decode or int
        js = json.loads(text)
        nodes = js["nodes"]
        value_cache: dict[str, object] = {}

        def value(nid: str):
            if nid not in value_cache:
                n = nodes[nid]
                op = n["op"]
                if n["eclass"].startswith("IVec"):
                    v = tuple(decode(int(nodes[c]["op"])) for c in n["children"])
                elif op.startswith('"'):
                    v = json.loads(op)
                elif op in ("true", "false"):
                    v = op == "true"
                elif n["eclass"].startswith("f64"):
                    v = float(op)
                else:
                    v = int(op)
                value_cache[nid] = v
            return value_cache[nid]

        primitive_of_class = {n["eclass"]: nid for nid, n in nodes.items() if nid.startswith("primitive-")}
        classes: dict[str, list[ENode]] = {}
        shapes: dict[str, tuple] = {}
        dtypes: dict[str, str] = {}
        for nid, n in nodes.items():
            ctor = n["op"]
            if not n["eclass"].startswith("T-"):
                if ctor in ("shape", "dtype") and n["children"]:
                    target = nodes[n["children"][0]]["eclass"]
                    (shapes if ctor == "shape" else dtypes)[target] = value(primitive_of_class[n["eclass"]])
                continue
            kids = n["children"]
            classes.setdefault(n["eclass"], []).append(_enode(ctor, kids, nodes, value, exact_ints or {}))
        data = cls(classes, list(js.get("root_eclasses", [])) if roots is None else roots)
        for cid in classes:
            if cid in shapes and cid in dtypes:
                data.types[cid] = TensorType(dtypes[cid], tuple(shapes[cid]))
        return data


def _enode(ctor: str, kids: list[str], nodes: dict, value, exact_ints: dict) -> ENode:
    cls = lambda nid: nodes[nid]["eclass"]  # noqa: E731
    if ctor in PLACEMENT_OF:
        return ENode(ctor, PLACEMENT_OF[ctor], (cls(kids[0]),))
    if ctor == "Input":
        return ENode(ctor, "param", (), (("name", value(kids[0])),))
    if ctor == "Const":
        v, dtype = value(kids[0]), value(kids[1])
        return ENode(ctor, "const", (), (("value", exact_ints.get((v, dtype), v)), ("dtype", dtype)))
    ops, attr_names = FAMILIES[ctor]
    rest = list(kids)
    op = value(rest.pop(0)) if ctor in NAMED_FAMILIES else ops[0]
    n_tensor = len(rest) - len(attr_names)
    tensors = tuple(cls(k) for k in rest[:n_tensor])
    attrs = tuple((name, value(k)) for name, k in zip(attr_names, rest[n_tensor:]))
    return ENode(ctor, op, tensors, attrs)
