"""The e-graph's vocabulary (egglog text) and Program -> e-graph.

One sort `T` holds both values and placed edges:

    (Input name) (Const value dtype)            leaves
    (Un op a) (Bin op a b) (Where c a b)         elementwise ops by arity
    (Red op a axes keepdims) (MatMul a b)
    (Transpose a perm) (Reshape a shape) (Bcast a shape) (Cast a dtype)
    (Slice a axes starts ends steps)             normalized as in the Graph
    (Concat a b axis) (Gather x indices axis)    axis non-negative
    (Iota shape axis dtype)                      a leaf: each element's index along axis
    (Global a) (Shared a) (Local a) (Inline a)   the placement of an edge

concat is variadic in programs but binary here: concat(a, b, c) enters
left-nested, (Concat (Global (Concat (Global a) (Global b) k)) (Global c) k),
the inner concat an e-class of its own read through an edge like every
operand; a one-operand concat is its operand.

Every operand of an op is a placement term: `(Bin "add" (Global x) (Global y))`
reads both operands from global memory. A placement is never unioned with
the value it wraps, so extraction can still tell the schedules apart. The
program enters with every edge Global (one kernel per op).

The `analysis` ruleset fills what rule conditions test: `shape` (Vec i64),
`dtype` (String), `numel`, `has-space`, and the op-class relations
(`is-injective`: elementwise, layout and movement e-nodes, each of whose output
elements reads at most one element of each operand).
"""

from __future__ import annotations

import math

from ..ir.graph import Graph, Node
from ..ir.ops import BINARY, COMPARE, OPS, REDUCE, UNARY
from ..ir.program import DTypeName
from .placement import Placement
from .symbols import STATIC_LIMIT, Encoding

PLACEMENT_CTORS = {p.value: p.ctor for p in Placement}

# Families of constructors: which ops each holds, and its attribute fields in order.
FAMILIES = {
    "Un": (UNARY, ()),
    "Bin": (BINARY + COMPARE, ()),
    "Where": (("where",), ()),
    "Red": (REDUCE, ("axes", "keepdims")),
    "MatMul": (("matmul",), ()),
    "Transpose": (("transpose",), ("perm",)),
    "Reshape": (("reshape",), ("shape",)),
    "Bcast": (("broadcast_to",), ("shape",)),
    "Cast": (("cast",), ("dtype",)),
    "Slice": (("slice",), ("axes", "starts", "ends", "steps")),
    "Concat": (("concat",), ("axis",)),
    "Gather": (("gather",), ("axis",)),
    "Iota": (("iota",), ("shape", "axis", "dtype")),
}
# Families whose first field is the op name (a String); the others are one op each.
NAMED_FAMILIES = ("Un", "Bin", "Red")


def family_arity(fam: str) -> int:
    """How many tensor operands a constructor of the family has (Concat is binary, see above)."""
    return 2 if fam == "Concat" else OPS[FAMILIES[fam][0][0]].arity


def family_of(op: str) -> str:
    for fam, (ops, _) in FAMILIES.items():
        if op in ops:
            return fam
    raise KeyError(op)


PRELUDE = r"""
(sort IVec (Vec i64))
(datatype T
  (Input String)
  (Const f64 String)
  (Un String T)
  (Bin String T T)
  (Where T T T)
  (Red String T IVec bool)
  (MatMul T T)
  (Transpose T IVec)
  (Reshape T IVec)
  (Bcast T IVec)
  (Cast T String)
  (Slice T IVec IVec IVec IVec)
  (Concat T T i64)
  (Gather T T i64)
  (Iota IVec i64 String)
  (Global T)
  (Shared T)
  (Local T)
  (Inline T))

(function shape (T) IVec :no-merge)
(function dtype (T) String :no-merge)
(function numel (T) i64 :no-merge)
(relation has-space (T IVec))
(relation compare-op (String))
(relation float-dtype (String))
(relation is-elementwise (T))
(relation is-reduction (T))
(relation is-matmul (T))
(relation is-layout (T))
(relation is-unary (T))
(relation is-binary (T))
(relation is-injective (T))
(relation is-input (T))
(relation is-movement (T))
(ruleset analysis)
""" + "".join(f'(compare-op "{op}")\n' for op in COMPARE) + "".join(
    f'(float-dtype "{d}")\n' for d in ("f16", "f32", "f64")
) + r"""
; ---- dtype -----------------------------------------------------------------
(rule ((= t (Const v d))) ((set (dtype t) d) (set (shape t) (vec-empty))) :ruleset analysis)
(rule ((= t (Iota s k d))) ((set (dtype t) d) (set (shape t) s)) :ruleset analysis)
(rule ((= t (Un op a)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Bin op a b)) (compare-op op) (= d (dtype a))) ((set (dtype t) "bool")) :ruleset analysis)
(rule ((= t (Bin op a b)) (= d (dtype b)) (!= op "less") (!= op "greater") (!= op "equal"))
      ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Where c a b)) (= d (dtype b))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Red op a ax k)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (MatMul a b)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Transpose a p)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Reshape a s)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Bcast a s)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Cast a d))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Slice a ax st en sp)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Concat a b k)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Gather a i k)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Global a)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Shared a)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Local a)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)
(rule ((= t (Inline a)) (= d (dtype a))) ((set (dtype t) d)) :ruleset analysis)

; ---- shape -----------------------------------------------------------------
(rule ((= t (Un op a)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Cast a d)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Reshape a s))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Bcast a s))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Global a)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Shared a)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Local a)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)
(rule ((= t (Inline a)) (= s (shape a))) ((set (shape t) s)) :ruleset analysis)

; numpy broadcasting of two shapes, one output dimension at a time:
; (bc a b i) holds the first i dimensions of broadcast(a, b).
(function bc (IVec IVec i64) IVec :no-merge)
(relation bc-want (IVec IVec))
(rule ((= t (Bin op x y)) (= a (shape x)) (= b (shape y))) ((bc-want a b)) :ruleset analysis)
(rule ((= t (Where c x y)) (= a (shape x)) (= b (shape y)) (= s (shape c)))
      ((bc-want a b)) :ruleset analysis)
(rule ((bc-want a b)) ((set (bc a b 0) (vec-empty))) :ruleset analysis)
; output dim i reads a[i - (n - len a)] when that index is >= 0, else 1
(rule ((= r (bc a b i)) (= n (max (vec-length a) (vec-length b))) (< i n)
       (>= (- i (- n (vec-length a))) 0) (>= (- i (- n (vec-length b))) 0))
      ((set (bc a b (+ i 1))
            (vec-push r (max (vec-get a (- i (- n (vec-length a)))) (vec-get b (- i (- n (vec-length b))))))))
      :ruleset analysis)
(rule ((= r (bc a b i)) (= n (max (vec-length a) (vec-length b))) (< i n)
       (< (- i (- n (vec-length a))) 0))
      ((set (bc a b (+ i 1)) (vec-push r (vec-get b (- i (- n (vec-length b))))))) :ruleset analysis)
(rule ((= r (bc a b i)) (= n (max (vec-length a) (vec-length b))) (< i n)
       (< (- i (- n (vec-length b))) 0))
      ((set (bc a b (+ i 1)) (vec-push r (vec-get a (- i (- n (vec-length a))))))) :ruleset analysis)
(rule ((= t (Bin op x y)) (= a (shape x)) (= b (shape y))
       (= r (bc a b (max (vec-length a) (vec-length b)))))
      ((set (shape t) r)) :ruleset analysis)
(relation bc3-want (IVec IVec))
(rule ((= t (Where c x y)) (= a (shape x)) (= b (shape y)) (= sc (shape c))
       (= r (bc a b (max (vec-length a) (vec-length b)))))
      ((bc-want sc r)) :ruleset analysis)
(rule ((= t (Where c x y)) (= a (shape x)) (= b (shape y)) (= sc (shape c))
       (= r (bc a b (max (vec-length a) (vec-length b))))
       (= r3 (bc sc r (max (vec-length sc) (vec-length r)))))
      ((set (shape t) r3)) :ruleset analysis)

; reductions: (red s axes keep i) is s with axes[i:] reduced (axes are sorted)
(function red (IVec IVec bool i64) IVec :no-merge)
(rule ((= t (Red op x ax k)) (= s (shape x))) ((set (red s ax k (vec-length ax)) s)) :ruleset analysis)
(rule ((= r (red s ax false i)) (> i 0))
      ((set (red s ax false (- i 1)) (vec-remove r (vec-get ax (- i 1))))) :ruleset analysis)
(rule ((= r (red s ax true i)) (> i 0))
      ((set (red s ax true (- i 1)) (vec-set r (vec-get ax (- i 1)) 1))) :ruleset analysis)
(rule ((= t (Red op x ax k)) (= s (shape x)) (= r (red s ax k 0))) ((set (shape t) r)) :ruleset analysis)

; transpose: (perm-acc s p i) holds the first i dimensions of the result
(function perm-acc (IVec IVec i64) IVec :no-merge)
(rule ((= t (Transpose x p)) (= s (shape x))) ((set (perm-acc s p 0) (vec-empty))) :ruleset analysis)
(rule ((= r (perm-acc s p i)) (< i (vec-length p)))
      ((set (perm-acc s p (+ i 1)) (vec-push r (vec-get s (vec-get p i))))) :ruleset analysis)
(rule ((= t (Transpose x p)) (= s (shape x)) (= r (perm-acc s p (vec-length p)))) ((set (shape t) r))
      :ruleset analysis)

; matmul: batch dims broadcast, then [m, n]; rank-1 operands as numpy does
(rule ((= t (MatMul x y)) (= a (shape x)) (= b (shape y)) (>= (vec-length a) 2) (>= (vec-length b) 2))
      ((bc-want (vec-pop (vec-pop a)) (vec-pop (vec-pop b)))) :ruleset analysis)
(rule ((= t (MatMul x y)) (= a (shape x)) (= b (shape y)) (>= (vec-length a) 2) (>= (vec-length b) 2)
       (= ba (vec-pop (vec-pop a))) (= bb (vec-pop (vec-pop b)))
       (= r (bc ba bb (max (vec-length ba) (vec-length bb)))))
      ((set (shape t) (vec-push (vec-push r (vec-get a (- (vec-length a) 2))) (vec-get b (- (vec-length b) 1)))))
      :ruleset analysis)
(rule ((= t (MatMul x y)) (= a (shape x)) (= b (shape y)) (= (vec-length a) 1) (= (vec-length b) 1))
      ((set (shape t) (vec-empty))) :ruleset analysis)
(rule ((= t (MatMul x y)) (= a (shape x)) (= b (shape y)) (= (vec-length a) 1) (>= (vec-length b) 2))
      ((set (shape t) (vec-remove b (- (vec-length b) 2)))) :ruleset analysis)
(rule ((= t (MatMul x y)) (= a (shape x)) (= b (shape y)) (>= (vec-length a) 2) (= (vec-length b) 1))
      ((set (shape t) (vec-pop a))) :ruleset analysis)

; slice: (sl s axes starts ends steps i) is s with the first i sliced axes
; sized as numpy does, ceil((min(end, dim) - start) / step)
(function sl (IVec IVec IVec IVec IVec i64) IVec :no-merge)
(rule ((= t (Slice x ax st en sp)) (= s (shape x))) ((set (sl s ax st en sp 0) s)) :ruleset analysis)
; (every primitive that could fail is in the query, where failing means no match;
; in an action it would abort the run)
(rule ((= r (sl s ax st en sp i)) (< i (vec-length ax)) (= a (vec-get ax i)) (< a (vec-length s))
       (< (vec-get en i) STATIC_LIMIT)
       (= e (min (vec-get en i) (vec-get s a))) (= b (vec-get st i)) (< b e) (= k (vec-get sp i)) (>= k 1))
      ((set (sl s ax st en sp (+ i 1)) (vec-set r a (/ (+ (- e b) (- k 1)) k))))
      :ruleset analysis)
; a symbolic end (rewrite/symbols.py: at least STATIC_LIMIT as encoded) is within its axis: the
; checker proved it for every value of the symbol
(rule ((= r (sl s ax st en sp i)) (< i (vec-length ax)) (= a (vec-get ax i)) (< a (vec-length s))
       (>= (vec-get en i) STATIC_LIMIT)
       (= e (vec-get en i)) (= b (vec-get st i)) (< b e) (= k (vec-get sp i)) (>= k 1))
      ((set (sl s ax st en sp (+ i 1)) (vec-set r a (/ (+ (- e b) (- k 1)) k))))
      :ruleset analysis)
(rule ((= t (Slice x ax st en sp)) (= s (shape x)) (= r (sl s ax st en sp (vec-length ax))))
      ((set (shape t) r)) :ruleset analysis)

; concat: the operands' dims add up along the axis
(rule ((= t (Concat x y k)) (= a (shape x)) (= b (shape y)) (< k (vec-length a)) (< k (vec-length b)))
      ((set (shape t) (vec-set a k (+ (vec-get a k) (vec-get b k))))) :ruleset analysis)

; gather: x.shape[:k] + indices.shape + x.shape[k+1:], one dim at a time:
; (ga a b k j) holds the first j dimensions of the result
(function ga (IVec IVec i64 i64) IVec :no-merge)
(rule ((= t (Gather x i k)) (= a (shape x)) (= b (shape i))) ((set (ga a b k 0) (vec-empty))) :ruleset analysis)
(rule ((= r (ga a b k j)) (< j k) (= d (vec-get a j))) ((set (ga a b k (+ j 1)) (vec-push r d))) :ruleset analysis)
(rule ((= r (ga a b k j)) (>= j k) (< j (+ k (vec-length b))))
      ((set (ga a b k (+ j 1)) (vec-push r (vec-get b (- j k))))) :ruleset analysis)
(rule ((= r (ga a b k j)) (>= j (+ k (vec-length b))) (< j (- (+ (vec-length a) (vec-length b)) 1)))
      ((set (ga a b k (+ j 1)) (vec-push r (vec-get a (+ (- j (vec-length b)) 1))))) :ruleset analysis)
(rule ((= t (Gather x i k)) (= a (shape x)) (= b (shape i)) (< k (vec-length a))
       (= r (ga a b k (- (+ (vec-length a) (vec-length b)) 1))))
      ((set (shape t) r)) :ruleset analysis)

; numel: the product of the shape, where it fits an i64 (a symbolic shape's, at the primes
; rewrite/symbols.py gives its terms, may not: its numel is then not set, and a condition on it
; is not met)
(function prod-acc (IVec i64) i64 :no-merge)
(rule ((= s (shape t))) ((set (prod-acc s 0) 1)) :ruleset analysis)
(rule ((= p (prod-acc s i)) (< i (vec-length s)) (= d (vec-get s i)) (>= d 0)
       (<= p (/ 4611686018427387903 (max d 1))))
      ((set (prod-acc s (+ i 1)) (* p d)))
      :ruleset analysis)
(rule ((= s (shape t)) (= p (prod-acc s (vec-length s)))) ((set (numel t) p)) :ruleset analysis)

; iteration space: what a kernel loops over to compute the value; a property of
; e-nodes, not values (x and sum(x)*1 are one value), so a relation
(rule ((= t (Red op x ax k)) (= s (shape x))) ((has-space t s)) :ruleset analysis)
(rule ((= t (MatMul x y)) (= s (shape t)) (= a (shape x)))
      ((has-space t (vec-push s (vec-get a (- (vec-length a) 1))))) :ruleset analysis)
(rule ((= t (Un op a)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Bin op a b)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Where c a b)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Transpose a p)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Reshape a p)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Bcast a p)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Cast a d)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Slice a ax st en sp)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Concat a b k)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Gather a i k)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Input n)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Const v d)) (= s (shape t))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Iota s k d))) ((has-space t s)) :ruleset analysis)
(rule ((= t (Global a)) (has-space a s)) ((has-space t s)) :ruleset analysis)
(rule ((= t (Shared a)) (has-space a s)) ((has-space t s)) :ruleset analysis)
(rule ((= t (Local a)) (has-space a s)) ((has-space t s)) :ruleset analysis)
(rule ((= t (Inline a)) (has-space a s)) ((has-space t s)) :ruleset analysis)

; op classes of a value (an e-class holding such a node)
(rule ((= t (Input n))) ((is-input t)) :ruleset analysis)
(rule ((= t (Un op a))) ((is-elementwise t) (is-unary t) (is-injective t)) :ruleset analysis)
(rule ((= t (Bin op a b))) ((is-elementwise t) (is-binary t) (is-injective t)) :ruleset analysis)
(rule ((= t (Where c a b))) ((is-elementwise t) (is-injective t)) :ruleset analysis)
(rule ((= t (Cast a d))) ((is-elementwise t) (is-layout t) (is-injective t)) :ruleset analysis)
(rule ((= t (Red op a ax k))) ((is-reduction t)) :ruleset analysis)
(rule ((= t (MatMul a b))) ((is-matmul t)) :ruleset analysis)
(rule ((= t (Transpose a p))) ((is-layout t) (is-injective t)) :ruleset analysis)
(rule ((= t (Reshape a s))) ((is-layout t) (is-injective t)) :ruleset analysis)
(rule ((= t (Bcast a s))) ((is-layout t) (is-injective t)) :ruleset analysis)
(rule ((= t (Slice a ax st en sp))) ((is-movement t) (is-injective t)) :ruleset analysis)
(rule ((= t (Concat a b k))) ((is-movement t) (is-injective t)) :ruleset analysis)
(rule ((= t (Gather a i k))) ((is-movement t) (is-injective t)) :ruleset analysis)
(rule ((= t (Iota s k d))) ((is-injective t)) :ruleset analysis)

; literals folded: add, sub, mul or div of two float literals is a literal (a rule's right side
; may write mul(?b, -2.0) for a scalar ?b; a program never does). Computed in f64 and kept only
; where the result is a normal number of the dtype, so no overflow, underflow or signed zero
; differs from the dtype's own arithmetic at run time (the value may differ from it by a
; rounding, as any rule's may)
(function normal-max (String) f64 :no-merge)
(function normal-min (String) f64 :no-merge)
(set (normal-max "f16") 65504.0) (set (normal-min "f16") 6.103515625e-05)
(set (normal-max "f32") 3.4028234663852886e+38) (set (normal-min "f32") 1.1754943508222875e-38)
(set (normal-max "f64") 1.7976931348623157e+308) (set (normal-min "f64") 2.2250738585072014e-308)
""" + "".join(
    f'(rule ((= t (Bin "{op}" (Global (Const a d)) (Global (Const b d)))) (= r ({fn} a b))\n'
    f"       (<= (abs r) (normal-max d)) (>= (abs r) (normal-min d)))\n"
    f"      ((union t (Const r d))) :ruleset analysis)\n"
    for op, fn in (("add", "+"), ("sub", "-"), ("mul", "*"), ("div", "/"))
)
PRELUDE = PRELUDE.replace("STATIC_LIMIT", str(STATIC_LIMIT))


def ivec(values, encoding: Encoding | None = None) -> str:
    """A vector of ints (dimensions, axes) as egglog text; a symbolic dimension as the program's
    `encoding` writes it (symbols.py)."""
    values = tuple(values)
    if not values:
        return "(vec-empty)"
    encode = encoding.encode if encoding is not None else int
    return "(vec-of " + " ".join(str(encode(v)) for v in values) + ")"


def f64(value) -> str:
    """An f64 as egglog text: inf, -inf and NaN are egglog's own literals (its f64 orders NaN above
    every number and equal to itself, so a NaN literal is one e-class)."""
    text = repr(float(value))
    if text == "-0.0":  # egglog's f64 equates -0.0 with 0.0: see const_term
        raise ValueError(f"constant {text} cannot enter the e-graph as an f64")
    return "NaN" if text == "nan" else text


def const_term(value, dtype: str) -> str:
    """The term of a literal of `dtype` (egglog text). egglog's f64 holds -0.0 and 0.0 as one value
    (they compare equal), so -0.0 enters as neg(0.0): the sign stays, and a pattern's 0.0 does not
    match it (x / -0.0 is -inf where x / 0.0 is inf)."""
    if value == 0 and math.copysign(1.0, float(value)) < 0:
        return f'(Un "neg" (Global (Const 0.0 {dtype})))'
    return f"(Const {f64(value)} {dtype})"


def literal(value) -> str:
    """An attribute or condition literal as egglog text."""
    if isinstance(value, DTypeName):
        return quote(value.name)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ivec(value)
    return str(int(value))


def quote(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def node_term(node: Node, operand: dict[int, str], encoding: Encoding | None = None) -> str:
    """The egglog term of one node, its operands given as (placed) terms; its symbolic dimensions
    written by the program's `encoding`."""
    op = node.op

    def vec(values) -> str:
        return ivec(values, encoding)

    args = [operand[i] for i in node.inputs]
    if op == "param":
        return f"(Input {quote(node.attr('name'))})"
    if op == "const":
        return const_term(node.attr("value"), quote(node.type.dtype))
    fam = family_of(op)
    if fam in ("Un", "Bin"):
        return f"({fam} {quote(op)} {' '.join(args)})"
    if fam == "Red":
        keep = "true" if node.attr("keepdims") else "false"
        return f"(Red {quote(op)} {args[0]} {vec(node.attr('axes'))} {keep})"
    if fam in ("Where", "MatMul"):
        return f"({fam} {' '.join(args)})"
    if fam == "Transpose":
        return f"(Transpose {args[0]} {vec(node.attr('perm'))})"
    if fam in ("Reshape", "Bcast"):
        return f"({fam} {args[0]} {vec(node.attr('shape'))})"
    if fam == "Slice":
        bounds = " ".join(vec(node.attr(k)) for k in ("axes", "starts", "ends", "steps"))
        return f"(Slice {args[0]} {bounds})"
    if fam == "Gather":
        return f"(Gather {args[0]} {args[1]} {node.attr('axis')})"
    if fam == "Concat":
        return concat_term(args, node.attr("axis"))
    if fam == "Iota":
        return f"(Iota {vec(node.attr('shape'))} {node.attr('axis')} {quote(node.attr('dtype'))})"
    return f"(Cast {args[0]} {quote(node.attr('dtype'))})"


def concat_term(operands: list[str], axis: int) -> str:
    """concat of two or more (placed) operand terms, left-nested; each inner concat is read through Global."""
    assert len(operands) >= 2, "a one-operand concat is its operand"
    term = f"(Concat {operands[0]} {operands[1]} {axis})"
    for b in operands[2:]:
        term = f"(Concat (Global {term}) {b} {axis})"
    return term


def graph_to_egglog(graph: Graph, encoding: Encoding | None = None) -> tuple[str, list[str]]:
    """Commands that insert `graph` with every edge Global (its symbolic dimensions by `encoding`,
    by default the graph's own); and the root names, in output order."""
    encoding = encoding or Encoding.of(graph)
    lines = []
    operand: dict[int, str] = {}
    for n in graph.nodes:
        name = f"$n{n.id}"
        if n.op == "concat" and len(n.inputs) == 1:
            lines.append(f"(let {name} $n{n.inputs[0]})")  # the identity: the same e-class
            operand[n.id] = operand[n.inputs[0]]
            continue
        lines.append(f"(let {name} {node_term(n, operand, encoding)})")
        if n.op == "param":
            lines.append(f"(set (shape {name}) {ivec(n.type.shape, encoding)})")
            lines.append(f"(set (dtype {name}) {quote(n.type.dtype)})")
        operand[n.id] = f"(Global {name})"
    roots = [f"$n{o}" for o in graph.outputs]
    return "\n".join(lines), roots


assert set(OPS) == {op for ops, _ in FAMILIES.values() for op in ops}
