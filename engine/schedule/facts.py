"""What a kernel's contents imply for its plan and its price, computed once per kernel.

The axes a tile may run along (every reduction, matmul and stored value inside varies along
them; a stored reduction nothing else reads may be split: global stitching), the on-chip buffers
a tile holds, the work of each loop nest, the products and how the micro-kernel walks each
(machine.py), and the held values read at another index (`alias_problem`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir.extent import is_symbolic
from ..ir.ops import ACCUMULATING, REDUCE, is_injective
from ..ir.program import INT_DTYPES, dtype_bytes
from .index import Ix, Mod, affine
from .kernel import AxisKind, Hold, Instance, Kernel, Ref, RefKind, packed_operand
from .machine import pair_columns, reads_left_in_place, sum_accumulator
from .target import Target

FREE_OPS = ("transpose", "reshape", "broadcast_to", "slice")  # index maps: no arithmetic


@dataclass
class KernelFacts:
    """What pricing needs from a kernel's contents, computed once per kernel."""

    restrict: list[frozenset]  # axis sets the tiled axes must lie in
    candidates: list[str]  # axes that may be tiled, in loop order
    partial_axes: dict[int, frozenset]  # reduction -> the axes it may be split along (global stitching)
    tails: dict[int, frozenset]  # such a reduction -> the instances computed from it after the last tile
    buffers: list[tuple[tuple[str, ...], int]]  # on-chip values: (axes, bytes per element)
    work: list[tuple[tuple[str, ...], str, float]]  # (axes of the loop nest, op, elements per point)
    matmuls: list[tuple[Instance, int]]  # (instance, k)
    aliases: list[tuple[tuple[Ix, ...], tuple[Ix, ...]]]  # a held value read at another index
    packs: dict[int, tuple[tuple[str, ...], int]]  # matmul -> its packable right operand: (axes, bytes each)
    packed_here: bool = False  # packs are made (`on` a target without a matrix unit)
    plain: frozenset = frozenset()  # matmuls whose left operand is read with plain loads (`plain_left`)
    # each product's left operand made across k (`made_across_k`), an element at a time: (its axes, the ops
    # making an element, which `work` prices at the vector rate)
    across_k: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    # of the packed products, those whose pack lowering replaces by their bound byte weight laid out in
    # pairs of k (`paired`): matmul -> (its column axis, the columns of one panel), which a tile's columns
    # are a multiple of: lowering lays them out in whole panels, its pack gone only then
    paired: dict[int, tuple[str, int]] = field(default_factory=dict)

    def on(self, target: Target, paired: dict[int, tuple[str, int]] | None = None) -> KernelFacts:
        """The facts on `target`: on the vector unit a matmul's computed or strided right operand is
        packed into a tile buffer (on chip too), except the `paired` products' (their B is read from
        the bound weight's bytes laid out at binding: no tile buffer); a matrix unit reads operand
        tiles where they are."""
        if target.matrix is not None or not self.packs:
            return self
        paired = paired or {}
        packs = [axes for key, axes in self.packs.items() if key not in paired]
        return replace(self, buffers=self.buffers + packs, packed_here=True, paired=paired)


def reduced_axes(inst: Instance) -> tuple[str, ...]:
    """The axes a reduction or matmul instance sums over (in its operands, not in its index)."""
    own = set(inst.axes)
    return tuple(dict.fromkeys(a for t in inst.operand_index for ix in t for a in ix.axes() if a not in own))


def facts(kernel: Kernel, types) -> KernelFacts:
    restrict: list[frozenset] = []
    buffers, work, matmuls, aliases = [], [], [], []
    packs: dict[int, tuple[tuple[str, ...], int]] = {}
    stored = set(kernel.stores)
    tails = _tails(kernel)
    partial_axes = {key: frozenset(kernel.instances[key].axes) | frozenset(reduced_axes(kernel.instances[key]))
                    for key in tails}
    in_tail = set().union(*tails.values()) if tails else set()
    for inst in kernel.instances:
        op = inst.node.op
        if op in ("param", "const"):
            continue
        accumulates = op in ACCUMULATING
        own = frozenset(inst.axes)
        if inst.key in partial_axes:
            restrict.append(partial_axes[inst.key])
        elif (accumulates or inst.key in stored) and inst.key not in in_tail:
            restrict.append(own)
        if op == "matmul":
            matmuls.append((inst, types[inst.node.children[0]].shape[-1]))
            axes = packed_operand(kernel, inst)
            if axes:
                packs[inst.key] = (axes, dtype_bytes(types[inst.node.children[1]].dtype))
        elif op not in FREE_OPS and inst.held:
            work.append((nest_axes(inst), op, 1.0))
        if inst.held and op != "param":
            work.extend(_inline_work(kernel, inst))
        if inst.hold in (Hold.SHARED, Hold.LOCAL) or (inst.hold is Hold.ROOT and accumulates):
            dtype = types[inst.cid].dtype
            wide = op in ("sum", "mean", "matmul")
            buffers.append((inst.axes, dtype_bytes(sum_accumulator(dtype) if wide else dtype)))
        for ref, index in zip(inst.operands, inst.operand_index):
            if ref.held and kernel.instances[ref.key].held and kernel.instances[ref.key].index != index:
                aliases.append((kernel.instances[ref.key].index, index))
    root_axes = [a for ix in kernel.root_instance.index for a in ix.axes()]
    order = list(dict.fromkeys(root_axes + [a.name for a in kernel.axes if a.kind is AxisKind.PARALLEL]
                               + [a for axes in partial_axes.values() for a in sorted(axes)]))
    candidates = [a for a in order if kernel.extents.get(a, 1) > 1
                  and (kernel.kinds[a] is AxisKind.PARALLEL or any(a in s for s in partial_axes.values()))]
    plain = frozenset(inst.key for inst, _ in matmuls if plain_left(kernel, inst))
    across_k = tuple((_left_axes(inst), _left_ops(kernel, inst)) for inst, _ in matmuls
                     if inst.key not in plain and made_across_k(kernel, inst))
    return KernelFacts(restrict, candidates, partial_axes, tails, buffers, work, matmuls, aliases, packs, plain=plain,
                       across_k=across_k)


def paired(kernel: Kernel, f: KernelFacts, types, target: Target, bound: frozenset) -> dict[int, tuple[str, int]]:
    """The packed products whose pack lowering/pairs.py replaces, as it lowers them on `target`: an i32
    product whose right operand is a `bound` i8 or u8 weight widened (`cast`, less or plus a literal zero
    point), read at affine indices, its k even and its one column axis whole panels of `pair_columns`,
    every extent static. Each maps to its column axis and the panel's columns: a tile's columns keep to
    whole panels (and a chunk of k to whole pairs), so the pass applies to every plan that assumes it
    (`plan.choose_tile`, `plan.candidate_plans`)."""
    columns = pair_columns(target)
    if not columns or not bound or not f.packs or any(is_symbolic(e) for e in kernel.extents.values()):
        return {}
    out = {}
    for inst, k in f.matmuls:
        if inst.key not in f.packs or types[inst.cid].dtype != "i32" or k % 2:
            continue
        col_axes = matrix_dims(inst)[1]
        if len(col_axes) != 1 or kernel.extents[col_axes[0]] % columns:
            continue
        weight = _widened_byte(kernel, inst.operands[1], types)
        if weight is not None and weight in bound:
            out[inst.key] = (col_axes[0], columns)
    return out


def _widened_byte(kernel: Kernel, ref: Ref, types) -> str | None:
    """The global byte value an inline operand widens to i32 (lowering/pairs.py `_byte_read`): `cast`
    of a read at affine indices, or that less or plus a literal; else None."""
    if not ref.inline:
        return None
    inst = kernel.instances[ref.key]
    op = inst.node.op
    if op in ("add", "sub") and types[inst.cid].dtype in INT_DTYPES and len(inst.operands) == 2:
        x, z = inst.operands
        if z.kind is not RefKind.CONST:
            return None
        if not x.inline:
            return None
        inst = kernel.instances[x.key]
        op = inst.node.op
    if op != "cast" or types[inst.cid].dtype != "i32" or len(inst.operands) != 1:
        return None
    read, = inst.operands
    if (read.kind is not RefKind.GLOBAL or types[read.target].dtype not in ("i8", "u8")
            or not all(affine(ix) for ix in inst.operand_index[0])):
        return None
    return read.target


def nest_axes(inst: Instance) -> tuple[str, ...]:
    """The axes of the loop nest computing a held instance (a reduction's reduced axes inside)."""
    return inst.axes + (reduced_axes(inst) if inst.node.op in ACCUMULATING else ())


def _inline_work(kernel: Kernel, held: Instance) -> list[tuple[tuple[str, ...], str, float]]:
    """The work of the values a held instance's nest computes inline: each once per iteration of
    that nest (a value read through a broadcast, rsqrt(var) under a [512, 64, 256] layer norm, is
    recomputed for every element it is broadcast to), except a product's operands, computed once
    per row and k (the left) or per k and column (the right) over their own axes."""
    out = []
    for key in kernel.inlined(held.key)[1:]:
        inst = kernel.instances[key]
        if inst.node.op in FREE_OPS or inst.node.op in ("param", "const"):
            continue
        out.append((inst.axes if held.node.op == "matmul" else nest_axes(held), inst.node.op, 1.0))
    return out


def _tails(kernel: Kernel) -> dict[int, frozenset]:
    """Reductions that may be split across tiles (global stitching): sum, mean, max or min whose
    readers in the kernel (and theirs, ...) are injective and vary along none of the axes the
    reduction sums over; the readers are then computed once, after the partials are combined."""
    readers = kernel.readers
    out = {}
    for inst in kernel.instances:
        if inst.node.op not in REDUCE:
            continue
        own = set(inst.axes)
        tail: set[int] = set()
        stack = list(readers.get(inst.key, ()))
        ok = True
        while stack and ok:
            key = stack.pop()
            if key in tail:
                continue
            r = kernel.instances[key]
            ok = is_injective(r.node.op) and set(r.axes) <= own
            tail.add(key)
            stack.extend(readers.get(key, ()))
        if ok and (tail or inst.key in kernel.stores):
            out[inst.key] = frozenset(tail)
    return out


def parallel_axes(kernel: Kernel, f: KernelFacts | None = None) -> list[str]:
    f = f or facts(kernel, None)
    axes = list(f.candidates)
    for allowed in f.restrict:
        axes = [a for a in axes if a in allowed]
    return axes


def alias_problem(kernel: Kernel, f: KernelFacts, parallel: list[str]) -> str:
    """A held value read at another index is fine where the two differ only by whole (untiled)
    axes of the same extent: the buffer holds those axes whole."""
    tiled = set(parallel)
    for own, other in f.aliases:
        for a, b in zip(own, other):
            if a == b:
                continue
            la, lb = a.label, b.label
            if (la is None or lb is None or la in tiled or lb in tiled
                    or kernel.extents[la] != kernel.extents[lb]):
                return ("a value kept on chip would be read at two different positions (a shifted or "
                        "transposed view of it), which one on-chip buffer per tile does not hold")
    return ""


def plain_left(kernel: Kernel, inst: Instance) -> bool:
    """Whether the micro-kernel reads a product's left operand where it is (machine.py's rule): a
    global value read through index maps or not, or one held on chip (read with plain loads at
    affine indices), and not one it computes per block of rows."""
    return reads_left_in_place(_left_loads(kernel, inst))


def made_across_k(kernel: Kernel, inst: Instance) -> bool:
    """Whether a product's computed left operand reads nothing consecutive along k (its sum axis), so
    the micro-kernel makes each block's rows of it with k outside and the rows inside, one element at
    a time: a conv's windows over a channels-first input, where each k reads another channel's plane
    (targets/c/micro_kernel.py `along_k`, the same test on the loops). A value held on chip is read
    at its own index, a global one at its read's."""
    k = reduced_axes(inst)
    if not k or inst.operands[0].kind is RefKind.CONST:
        return False
    left = inst.operands[0]
    chain = kernel.inlined(left.key) if left.inline else [inst.key]
    keys = set(chain)
    indices = [r.index for r in kernel.reads if r.site[0] in keys]
    for key in chain:
        for ref, index in zip(kernel.instances[key].operands, kernel.instances[key].operand_index):
            if ref.held:
                indices.append(index)
    return not any(index and _consecutive_along(index[-1], k[-1]) for index in indices)


# a run of at least this many consecutive elements along k (its remainder by this) counts as read along k:
# lowering splits such a k (lowering/delinearize.py) and the innermost loop walks the run
RUN_ALONG_K = 8


def _consecutive_along(ix: Ix, k: str) -> bool:
    """Whether index `ix` moves by one element as k does: directly, or through `k % d` (a ViT patch's
    row of 16 pixels, k walking channel, row and pixel) for runs of RUN_ALONG_K at least."""
    return ix.coef(k) == 1 or any(isinstance(t, Mod) and c == 1 and t.d >= RUN_ALONG_K and t.x.coef(k) == 1
                                  for t, c in ix.terms)


def _left_ops(kernel: Kernel, inst: Instance) -> tuple[str, ...]:
    """The arithmetic a product's inline left operand is made of: neither index maps nor the concats of a
    conv's taps (targets/c/a_pieces.py cuts k at their pieces, so they cost nothing an element). A concat
    whose piece depends on the row (a stem's padding, the row's window starting before the input) is a
    select an element."""
    left = inst.operands[0]
    if not left.inline:
        return ()
    rows = set(_left_axes(inst)) - set(reduced_axes(inst))
    ops = []
    for key in kernel.inlined(left.key):
        i = kernel.instances[key]
        if i.node.op == "concat":
            if rows & set(i.index[i.node.attr("axis")].axes()):
                ops.append("concat")
        elif i.node.op not in FREE_OPS and i.node.op not in ("param", "const"):
            ops.append(i.node.op)
    return tuple(ops)


def _left_axes(inst: Instance) -> tuple[str, ...]:
    """The axes of a product's left operand: its rows (and batch) and the k it sums over."""
    columns = set(matrix_dims(inst)[1])
    return tuple(a for a in nest_axes(inst) if a not in columns)


def _left_loads(kernel: Kernel, inst: Instance) -> list[tuple[Ix, ...]] | None:
    """The indices of the loads lowering makes a product's left operand of, or None where it is
    computed (a literal, or arithmetic beyond index maps). A held value is read at the affine index
    of its own buffer (none here: its index is the buffer's)."""
    left = inst.operands[0]
    if left.kind is RefKind.CONST:
        return None
    if not left.inline:
        return [] if left.held else _global_reads(kernel, [inst.key], 0)
    chain = kernel.inlined(left.key)
    if any(kernel.instances[key].node.op not in FREE_OPS for key in chain):
        return None
    return _global_reads(kernel, chain, None)


def _global_reads(kernel: Kernel, keys, position: int | None) -> list[tuple[Ix, ...]]:
    """The indices of the global reads by instances `keys` (at operand `position`, or any)."""
    keys = set(keys)
    return [r.index for r in kernel.reads if r.site[0] in keys and position in (None, r.site[1])]


def matrix_dims(inst: Instance) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The axes of a product's rows and of its columns, as the matrix unit runs it: those of its
    output's last two dimensions (the others are its batch). Lowering records them on the
    product's nest, whose accumulator may be laid out otherwise (over the kernel's axes, after a
    reshape), and the simulator counts tiles by them. A vector operand has no such dimension in
    the output (numpy's matmul drops it): a vector times a batch of matrices has rows () and its
    output's last two dimensions are the batch and the columns (hypothesis found the batch taken
    for rows: no tile counted)."""
    axes = [tuple(dict.fromkeys(ix.axes())) for ix in inst.index]
    vector_a, vector_b = (len(ix) == 1 for ix in inst.operand_index[:2])
    if vector_a or vector_b:
        last = axes[-1] if axes else ()
        return (() if vector_a else last), (() if vector_b else last)
    return (axes[-2] if len(axes) >= 2 else ()), (axes[-1] if axes else ())
