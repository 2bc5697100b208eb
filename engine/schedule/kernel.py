"""The kernel model: what a schedule is, as plain immutable data.

A choice picks one e-node per e-class. Its values (non-placement e-nodes) and the placements on
their operand edges form the schedule: a list of kernels, each a group of ops joined by non-global
edges (DESIGN). A kernel holds its values as *instances*, each at an *index*: one `Ix` per
dimension of the value, over the kernel's axes (`p0, p1, ...` the root's output axes, `r0, ...`
axes reduced inside the kernel), and records the global values it reads (`Read`) with the nest
that performs each read.

Kernels are formed in two steps: a walk from each root (`form.py`) and merging of the kernels
joined by held values, computed roots and shared inputs (`merge.py`). The cost model (`cost.py`)
decides tiling and prices kernels from the result; lowering turns it into loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from enum import Enum, StrEnum
from functools import cached_property

from ..ir.frozen import cached_hash
from ..ir.program import TensorType
from ..rewrite.egraph_data import ENode
from .index import FloorDiv, Indirect, Ix, Mod
from .maps import GatherRef, Guard


class Hold(StrEnum):
    """How a kernel holds a value it computes."""

    ROOT = "root"  # in a nest of its own, written to global memory
    SHARED = "shared"  # on chip for the whole tile
    LOCAL = "local"  # on chip, forwarded tile by tile
    INLINE = "inline"  # an expression inside the nest that reads it, recomputed per use


class AxisKind(StrEnum):
    PARALLEL = "parallel"  # an output axis: may be tiled
    REDUCE = "reduce"  # an axis a reduction or matmul sums over inside the kernel


class RefKind(Enum):
    GLOBAL = "global"  # a value in global memory, read by the kernel (`Read`)
    CONST = "const"  # a literal
    HELD = "held"  # an instance of the kernel, held as the reference says


@dataclass(frozen=True, slots=True)
class Ref:
    """An operand reference: the global value `target` (an e-class), the literal `target`, or the
    instance of key `target`, held as `hold` (shared, local or inline)."""

    kind: RefKind
    target: object
    hold: Hold | None = None

    @property
    def held(self) -> bool:
        """Whether it names an instance of the kernel (a fused edge)."""
        return self.kind is RefKind.HELD

    @property
    def inline(self) -> bool:
        return self.hold is Hold.INLINE

    @property
    def key(self) -> int:
        assert self.kind is RefKind.HELD
        return self.target

    def rekeyed(self, key) -> Ref:
        """This reference with its instance key mapped by `key` (a function); others unchanged."""
        return Ref(RefKind.HELD, key(self.target), self.hold) if self.kind is RefKind.HELD else self


def global_ref(cid: str) -> Ref:
    return Ref(RefKind.GLOBAL, cid)


def const_ref(value: object) -> Ref:
    return Ref(RefKind.CONST, value)


def held_ref(key: int, hold: Hold) -> Ref:
    return Ref(RefKind.HELD, key, hold)


def index_axes(index: tuple[Ix, ...]) -> tuple[str, ...]:
    """The axes an index varies along, in first-use order."""
    return tuple(dict.fromkeys(a for ix in index for a in ix.axes()))


def indirect_atoms(index: tuple[Ix, ...]) -> Iterator[Indirect]:
    """The gathered indices an index evaluates: its Indirect atoms, those inside div/mod and those
    inside a gathered index (a gather of gathered indices)."""
    for ix in index:
        for t, _ in ix.terms:
            if isinstance(t, Indirect):
                yield t
                if isinstance(t.value, GatherRef):
                    yield from indirect_atoms(t.value.index)
            elif isinstance(t, (FloorDiv, Mod)):
                yield from indirect_atoms((t.x,))


@cached_hash
@dataclass(frozen=True)
class Instance:
    cid: str  # the value's e-class
    node: ENode
    index: tuple[Ix, ...]  # where each of its elements sits: one Ix per dimension, over kernel axes
    hold: Hold
    key: int  # its position in Kernel.instances
    operands: tuple[Ref, ...] = ()
    operand_index: tuple[tuple[Ix, ...], ...] = ()  # where each operand is read
    owner: int = -1  # the held instance whose nest computes it (itself, unless inline)
    guards: tuple[Guard, ...] = ()  # computed only where these hold (inside a concat piece)

    @property
    def held(self) -> bool:
        return self.hold is not Hold.INLINE

    def renumbered(self, key: int, owner: int, operands: tuple[Ref, ...]) -> "Instance":
        """This instance under another key, owner and operand references (as `Read.moved`)."""
        return Instance(self.cid, self.node, self.index, self.hold, key, operands, self.operand_index, owner,
                        self.guards)

    def renamed(self, cid: str, node: ENode, operands: tuple[Ref, ...]) -> "Instance":
        """This instance computing class `cid` by `node`, with other operand references. Its fields are
        filled directly: the frozen dataclass's constructor sets each through object.__setattr__, and
        the search renames instances by the million."""
        inst = object.__new__(Instance)
        inst.__dict__.update(cid=cid, node=node, index=self.index, hold=self.hold, key=self.key, operands=operands,
                             operand_index=self.operand_index, owner=self.owner, guards=self.guards)
        return inst

    @cached_property
    def axes(self) -> tuple[str, ...]:
        """The kernel axes its value varies along, in first-use order; a matmul's columns last (its
        accumulator's rows contiguous, as the micro-kernel wants, also where a batch dimension is
        a part of the columns' axis: a grouped Conv's groups)."""
        axes = index_axes(self.index)
        if self.node.op == "matmul" and self.index:
            cols = set(self.index[-1].axes())
            axes = tuple(a for a in axes if a not in cols) + tuple(a for a in axes if a in cols)
        return axes

    @property
    def gathered(self) -> Indirect:
        """A gather's Indirect atom: where it reads its table along its axis (maps.py's gather)."""
        ((atom, _),) = self.operand_index[0][self.node.attr("axis")].terms
        return atom


def packed_operand(kernel: Kernel, inst: Instance) -> tuple[str, ...]:
    """The axes of the tile buffer a matmul's right operand is packed into before the product
    (columns innermost), or () when the product reads it where it is.

    The product streams vectors of its right operand along the columns. A computed operand (a
    bias add, a softmax, a value read through a transpose) would be evaluated, or gathered with a
    stride, once per block of rows; packed, it is computed once per tile and read contiguously. A
    global value read with the columns as its last index needs no packing, and neither does an
    operand of a product of one row that reads memory contiguously along the sum (a decoder step's
    query against the keys, `q . k^T`): the C backend sums each column as a dot product along its
    contiguous run (`read_along_sum`)."""
    if inst.node.op != "matmul":
        return ()
    right = inst.operands[1]
    if right.kind is RefKind.CONST or not inst.index or len(inst.operand_index[1]) < 2:
        return ()  # (a vector right operand has no columns)
    columns = tuple(inst.index[-1].axes())
    if not columns:
        return ()
    if right.kind is RefKind.GLOBAL:
        read = next(r for r in kernel.reads if r.site == (inst.key, 1))
        if read.index and read.index[-1] == inst.index[-1] and not set(columns) & set(index_axes(read.index[:-1])):
            return ()
    elif not right.inline:
        return ()  # held on chip over its own axes
    if read_along_sum(kernel, inst, columns) or one_row(kernel, inst):
        return ()
    axes = index_axes(inst.operand_index[1])
    return tuple(a for a in axes if a not in columns) + tuple(a for a in axes if a in columns)


def one_row(kernel: Kernel, inst: Instance) -> bool:
    """Whether matmul `inst` makes one row (its rows' axes, if any, of extent 1): it reads each
    element of its right operand once, so a packed copy would only add a write and a read."""
    return len(inst.index) >= 2 and all(kernel.extents.get(a, 1) == 1 for a in inst.index[-2].axes())


def read_along_sum(kernel: Kernel, inst: Instance, columns: tuple[str, ...]) -> bool:
    """Whether matmul `inst` makes one row (its rows' axes, if any, of extent 1) and every global read
    its right operand makes along the columns runs along the summed axis: the summed axis appears in a
    trailing part of the index with no column in it, the columns only before it. That is a key read
    by its last index (`q . k^T`) and a packed 4-bit weight read a byte per two positions
    (`b[n, k // 2]`) with its block's scale (`s[n, k // 32]`): targets/c/dot.py and
    targets/c/nibble_dot.py sum each column along its run."""
    if not one_row(kernel, inst):
        return False
    summed = inst.operand_index[1][-2]
    axes = tuple(summed.axes())
    if len(axes) != 1 or summed.coef(axes[0]) != 1:
        return False
    along = [r for r in kernel.reads if r.owner == inst.key and set(columns) & set(r.axes)]
    return bool(along) and all(_runs_along(r.index, axes[0], columns) for r in along)


def _runs_along(index: tuple[Ix, ...], k: str, columns: tuple[str, ...]) -> bool:
    """k only in a non-empty trailing part of `index`, each position there of k alone; the columns only before it."""
    first = next((i for i, ix in enumerate(index) if k in set(ix.axes())), None)
    if first is None:
        return False
    return (all(set(ix.axes()) == {k} for ix in index[first:])
            and not set(columns) & set(index_axes(index[first:])))


@cached_hash
@dataclass(frozen=True)
class Read:
    """A global value read inside a kernel: at `index`, under `guards`, in the nest of `owner`."""

    cid: str
    index: tuple[Ix, ...]
    owner: int
    site: tuple[int, int]  # (consumer instance key, operand position)
    guards: tuple[Guard, ...] = ()
    shared: bool = False  # an input read through a `shared` edge: joins the kernels that read it so

    @cached_property
    def axes(self) -> tuple[str, ...]:
        return index_axes(self.index)

    def moved(self, owner: int, site: tuple[int, int] | None = None) -> "Read":
        """This read in another nest (and at another site): `dataclasses.replace` without its
        introspection, which kernel merging calls millions of times on a large program."""
        return Read(self.cid, self.index, owner, self.site if site is None else site, self.guards, self.shared)


@dataclass(frozen=True)
class Axis:
    name: str
    extent: int
    kind: AxisKind


@cached_hash
@dataclass(frozen=True)
class Kernel:
    roots: tuple[str, ...]  # the values it writes to global memory (the first sets the axes)
    stores: tuple[int, ...]  # the instance writing each root
    instances: tuple[Instance, ...]
    reads: tuple[Read, ...]
    axes: tuple[Axis, ...]
    problems: tuple[str, ...] = ()

    @property
    def root(self) -> str:
        return self.roots[0]

    @property
    def root_instance(self) -> Instance:
        return self.instances[self.stores[0]]

    @cached_property
    def extents(self) -> dict[str, int]:
        return {a.name: a.extent for a in self.axes}

    @cached_property
    def kinds(self) -> dict[str, AxisKind]:
        return {a.name: a.kind for a in self.axes}

    @cached_property
    def read_values(self) -> frozenset[str]:
        """The global values it reads."""
        return frozenset(r.cid for r in self.reads)

    @cached_property
    def inputs(self) -> dict[str, list[Read]]:
        """The global values it reads, each with its reads, in first-read order."""
        out: dict[str, list[Read]] = {}
        for r in self.reads:
            out.setdefault(r.cid, []).append(r)
        return out

    @property
    def problem(self) -> str:
        return "; ".join(dict.fromkeys(self.problems))

    @cached_property
    def gathers(self) -> dict[Indirect, int]:
        """Each Indirect atom -> the first gather instance reading through it: the one whose
        indices operand lowering evaluates for it (every such gather reads the same index value)."""
        out: dict[Indirect, int] = {}
        for inst in self.instances:
            if inst.node.op == "gather":
                out.setdefault(inst.gathered, inst.key)
        return out

    @cached_property
    def index_only(self) -> frozenset[int]:
        """The instances computed from indices and literals alone (an iota's cone, read no tensor):
        two kernels computing one are not joined by it (merge.py), each recomputes it."""
        out: set[int] = set()
        for inst in self.ordered():
            if inst.node.op == "iota" or (inst.operands and inst.node.op not in ("param", "gather") and all(
                    ref.kind is RefKind.CONST or (ref.held and ref.key in out) for ref in inst.operands)):
                out.add(inst.key)
        return frozenset(out)

    def inlined(self, key: int) -> list[int]:
        """`key` and the instances its expression computes inline (through inline operands, each once)."""
        seen: dict[int, None] = {}
        stack = [key]
        while stack:
            k = stack.pop()
            if k not in seen:
                seen[k] = None
                stack.extend(ref.key for ref in self.instances[k].operands if ref.inline)
        return list(seen)

    @cached_property
    def readers(self) -> dict[int, list[int]]:
        """For each instance, the instances reading it through a fused edge."""
        out: dict[int, list[int]] = {}
        for inst in self.instances:
            for ref in inst.operands:
                if ref.held:
                    out.setdefault(ref.key, []).append(inst.key)
        return out

    def ordered(self) -> list[Instance]:
        """Instances with every operand before its reader, stores in root order."""
        done: dict[int, None] = {}

        def visit(key: int) -> None:
            if key in done:
                return
            inst = self.instances[key]
            for ref in inst.operands:
                if ref.held:
                    visit(ref.key)
            for atom in indirect_atoms(inst.index):
                ref = self.instances[self.gathers[atom]].operands[1]  # the gather's indices operand
                if ref.held:
                    visit(ref.key)
            done[key] = None

        for key in self.stores:
            visit(key)
        return [self.instances[k] for k in done]


@dataclass
class Schedule:
    kernels: list[Kernel]
    outputs: list[str]
    types: dict[str, TensorType]
    params: dict[str, str] = field(default_factory=dict)  # e-class -> parameter name
    constants: dict[str, object] = field(default_factory=dict)  # an output that is a literal -> its value

    def kernel_of(self, cid: str) -> Kernel | None:
        return next((k for k in self.kernels if cid in k.roots), None)


class CyclicChoice(Exception):
    """The choice makes a value depend on itself (an e-graph cycle), or its kernels depend on each
    other: it denotes no runnable program."""



def with_owners(k: Kernel) -> Kernel:
    """Every global read once per nest that makes it: an inline value is an expression inside each
    nest that reads it (directly or through other inline values), so its reads happen in each of
    them (the cost model stages what two nests read)."""
    nests: dict[int, set[int]] = {}
    for inst in k.instances:
        if inst.held:
            for key in k.inlined(inst.key):
                nests.setdefault(key, set()).add(inst.key)
    # a gather's indices are read wherever its index is evaluated: in the nests that read through
    # it, and in the nest of a value held at a gathered index
    evaluates: dict[Indirect, set[int]] = {}
    read_at: dict[int, list[tuple[Ix, ...]]] = {}
    for r in k.reads:
        read_at.setdefault(r.site[0], []).append(r.index)
    for inst in k.instances:
        reads_at = read_at.get(inst.key, ())
        for atom in set(indirect_atoms(inst.index)).union(*(indirect_atoms(index) for index in reads_at)):
            evaluates.setdefault(atom, set()).update(nests.get(inst.key, ()))
    reads = []
    for r in dict.fromkeys(r.moved(-1) for r in k.reads):
        owners = set(nests.get(r.site[0], ()))
        if r.site[1] == 1 and k.instances[r.site[0]].node.op == "gather":
            owners |= evaluates.get(k.instances[r.site[0]].gathered, set())
        reads.extend(r.moved(owner) for owner in sorted(owners))
    return replace(k, reads=tuple(reads))
