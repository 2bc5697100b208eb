"""Schedule -> LoopProgram: each kernel becomes tile loops around per-value loop nests.

For a kernel tiled over axes P (outermost first) with tile sizes t:

    for p0o in 0..E0/t0 parallel {          # one loop per tiled axis (none for one tile)
      <copies of staged inputs that vary along p0 only>
      for p1o in 0..E1/t1 parallel { ... per-tile body ... } }

Inside a tile, every held value (shared, local, the root) gets a loop nest over
its axes, writing a global temporary (the round trip the accelerator seed
complains of) that `forward_buffers` then moves on chip: a tiled axis `a` runs 0..t within the tile (global index
`ao*t + a`), any other axis over its whole extent. Inline values become
expressions inside their readers' nests. Reductions and matmuls initialize
their accumulator, then accumulate over their reduced axes; `mean` divides at
the end. A global input read more than once, or not varying along every tiled
axis, is staged on chip: copied once where the innermost tiled axis it varies
along moves on (at kernel entry if along none), as the cost model counts.
"""

from __future__ import annotations

from ..engine.cost import KernelCost, ScheduleCost, resident_inputs, staged
from ..engine.ir import TensorType
from ..engine.recursion import allows_deep_recursion
from ..engine.schedule import Instance, Kernel, Label, Schedule
from ..engine.schedule_print import global_names
from .loops import Accumulate, Buffer, Expr, For, Ix, Lit, Load, LoopKernel, LoopProgram, Op, Stmt, Store



def identity(op: str, dtype: str):
    """The starting value of a reduction's accumulator."""
    if op in ("sum", "mean"):
        return 0
    import numpy as np

    if dtype in ("f16", "f32", "f64"):
        return float("-inf") if op == "max" else float("inf")
    info = np.iinfo(np.int32 if dtype == "i32" else np.int64)
    return int(info.min) if op == "max" else int(info.max)


def _widen(program: LoopProgram, target) -> LoopProgram:
    from .widen import widen_f16_accumulators

    return widen_f16_accumulators(program)


def _forward(program: LoopProgram, target) -> LoopProgram:
    from .forward import forward_buffers

    return forward_buffers(program)


def _merge(program: LoopProgram, target) -> LoopProgram:
    from .alloc import merge_allocations

    return merge_allocations(program, alignment=target.alignment)


# The passes after loop-nest formation, in order. Tests run the verifier between them.
PASSES = [_widen, _forward, _merge]


@allows_deep_recursion
def lower(compiled) -> LoopProgram:
    """The lowering pipeline: loop nests, then merged shared allocations, then the verifier."""
    from .verify import verify

    target = compiled.target
    program = lower_schedule(compiled.graph.name, compiled.schedule, compiled.cost, target)
    for lowering_pass in PASSES:
        program = lowering_pass(program, target)
    verify(program, capacity=target.onchip_bytes)
    return program


def lower_schedule(name: str, schedule: Schedule, cost: ScheduleCost, target) -> LoopProgram:
    names = global_names(schedule)
    types = schedule.types
    params = [Buffer(n, "global", types[c].dtype, types[c].shape) for c, n in schedule.params.items()]
    intermediates = []
    kernels = []
    outputs = set(schedule.outputs)
    for i, (kernel, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        if kernel.root not in outputs:
            t = types[kernel.root]
            intermediates.append(Buffer(names[kernel.root], "global", t.dtype, t.shape))
        lowering = _KernelLowering(f"k{i}", kernel, kc, types, names, target)
        kernels.append(lowering.lower())
        intermediates.extend(lowering.temporaries)
    for cid, value in schedule.constants.items():  # an output that is a literal: a kernel filling it
        kernels.append(fill_kernel(f"k{len(kernels)}", names[cid], types[cid], value))
    for cid in schedule.outputs:
        if cid not in {k.root for k in schedule.kernels} and cid not in schedule.params | schedule.constants:
            raise AssertionError(f"output {cid} has no kernel")
    out_buffers = [Buffer(names[c], "global", types[c].dtype, types[c].shape)
                   for c in dict.fromkeys(schedule.outputs) if c not in schedule.params]
    return LoopProgram(name, params, [names[c] for c in schedule.outputs], intermediates, kernels, out_buffers)


def fill_kernel(name: str, buffer: str, t: TensorType, value) -> LoopKernel:
    """A kernel storing `value` into every element of `buffer`."""
    loops = [For(f"p{d}", n, "serial", []) for d, n in enumerate(t.shape)]
    body: Stmt = Store(buffer, tuple(Ix.var(loop.var) for loop in loops), Lit(value, t.dtype))
    for loop in reversed(loops):
        loop.body.append(body)
        body = loop
    return LoopKernel(name, [], [body])


class _KernelLowering:
    def __init__(self, name: str, kernel: Kernel, kc: KernelCost, types: dict[str, TensorType],
                 names: dict[str, str], target):
        self.name = name
        self.k = kernel
        self.kc = kc
        self.types = types
        self.names = names
        self.parallel = kc.parallel
        self.tile = kc.tile
        self.allocs: list[Buffer] = []
        self.temporaries: list[Buffer] = []
        self.forwardable: dict[str, str] = {}
        self.held: dict[int, str] = {}  # instance key -> the buffer holding it
        self.staged: dict[str, str] = {}  # global input e-class -> its on-chip copy
        self.resident = resident_inputs(kernel, kc.parallel, types, target)

    # -- indices -------------------------------------------------------------

    def extent(self, label: str) -> int:
        return self.tile[label] if label in self.tile else self.k.extents[label]

    def global_index(self, labels: tuple[Label, ...]) -> tuple[Ix, ...]:
        out = []
        for lab in labels:
            if lab is None:
                out.append(Ix())
            elif lab in self.tile and self.tile[lab] < self.k.extents[lab]:
                out.append(Ix.var(lab + "o", self.tile[lab]) + Ix.var(lab))
            else:  # a whole axis, or a tiled axis with a single tile
                out.append(Ix.var(lab))
        return tuple(out)

    def local_index(self, labels: tuple[Label, ...]) -> tuple[Ix, ...]:
        return tuple(Ix() if lab is None else Ix.var(lab) for lab in labels)

    def local_shape(self, labels: tuple[Label, ...]) -> tuple[int, ...]:
        return tuple(1 if lab is None else self.extent(lab) for lab in labels)

    def nest(self, labels, leaf: Stmt, kind: str = "serial") -> Stmt:
        for lab in reversed([lab for lab in dict.fromkeys(labels) if lab is not None]):
            leaf = For(lab, self.extent(lab), "reduce" if lab.startswith("r") else kind, [leaf])
        return leaf

    # -- the kernel ----------------------------------------------------------

    def lower(self) -> LoopKernel:
        body_at: dict[int, list[Stmt]] = {i: [] for i in range(len(self.parallel) + 1)}
        for cid, labels in self.k.inputs.items():
            if self.needs_staging(cid, labels):
                level = 0 if cid in self.resident else self.staging_level(labels)
                body_at[level].extend(self.stage(cid, labels))
        for inst in self.k.ordered():
            if inst.placement != "inline":
                body_at[len(self.parallel)].extend(self.compute(inst))
        body = body_at[len(self.parallel)]
        for level in reversed(range(len(self.parallel))):
            axis = self.parallel[level]
            tiles = self.k.extents[axis] // self.tile[axis]
            if tiles == 1:  # a tile loop of one iteration is no loop
                body = body_at[level] + body
                continue
            loop = For(axis + "o", tiles, "parallel", body)
            body = body_at[level] + [loop]
        return LoopKernel(self.name, self.allocs, body, forwardable=self.forwardable)

    def needs_staging(self, cid: str, labels) -> bool:
        return cid in self.resident or staged(self.k, cid, labels, self.parallel)

    def staging_level(self, labels) -> int:
        """The depth of tile loops the copy sits in: just inside the innermost tiled axis it varies along."""
        have = [i for i, a in enumerate(self.parallel) if a in labels]
        return max(have) + 1 if have else 0

    def stage(self, cid: str, labels) -> list[Stmt]:
        t = self.types[cid]
        name = f"{self.names.get(cid, cid)}_s"
        if cid in self.resident:
            shape = t.shape
            index = tuple(Ix.var(f"s{i}") for i in range(len(shape)))
            loops = [(f"s{i}", d) for i, d in enumerate(shape)]
            src = Load(self.names[cid], index)
            leaf: Stmt = Store(name, index, src)
            for var, d in reversed(loops):
                leaf = For(var, d, "serial", [leaf])
            self.allocs.append(Buffer(name, "shared", t.dtype, shape))
            self.staged[cid] = name
            return [leaf]
        shape = self.local_shape(labels)
        self.allocs.append(Buffer(name, "shared", t.dtype, shape))
        self.staged[cid] = name
        leaf = Store(name, self.local_index(labels), Load(self.names[cid], self.global_index(labels)))
        return [self.nest(labels, leaf)]

    def buffer_for(self, inst: Instance) -> str:
        """The buffer an instance's values go to: the output, or a global temporary of this kernel
        (a shared or local value; forward_buffers moves it on chip)."""
        if inst.placement == "root":
            return self.names[inst.cid]
        name = f"{self.name}_v{inst.key}"
        t = self.types[inst.cid]
        self.temporaries.append(Buffer(name, "global", t.dtype, t.shape))
        self.forwardable[name] = "local" if inst.placement == "local" else "shared"
        self.held[inst.key] = name
        return name

    def compute(self, inst: Instance) -> list[Stmt]:
        op = inst.node.op
        if inst.placement == "root" and op in ("sum", "mean", "max", "min", "matmul"):
            # accumulate on chip, then write the finished tile once
            acc = Instance(inst.cid, inst.node, inst.labels, "local", inst.key, inst.operands, inst.operand_labels)
            out = self.compute(acc)
            store = Store(self.names[inst.cid], self.global_index(inst.labels),
                          Load(self.held[inst.key], self.global_index(inst.labels)))
            return out + [self.nest(inst.labels, store)]
        name = self.buffer_for(inst)
        index = self.global_index(inst.labels)
        dtype = self.types[inst.cid].dtype
        if op in ("sum", "mean", "max", "min"):
            (operand,) = self.operands(inst)
            acc = "sum" if op == "mean" else op
            init = self.nest(inst.labels, Store(name, index, Lit(identity(op, dtype), dtype)))
            # keepdims: output axes the reduction does not loop over have extent 1
            looped = set(inst.operand_labels[0])
            acc_index = tuple(ix if lab in looped else Ix() for ix, lab in zip(index, inst.labels))
            loop = self.nest(inst.operand_labels[0], Accumulate(name, acc_index, acc, operand))
            out = [init, loop]
            if op == "mean":
                n = 1
                for a in inst.node.attr("axes"):
                    n *= self.types[inst.node.children[0]].shape[a]
                scale = Op("div", (Load(name, index), Lit(float(n), dtype)), dtype)
                out.append(self.nest(inst.labels, Store(name, index, scale)))
            return out
        if op == "matmul":
            a, b = self.operands(inst)
            init = self.nest(inst.labels, Store(name, index, Lit(0, dtype)))
            # (batch..., m, k, n): the innermost loop runs along the contiguous rows of b and the accumulator
            k = tuple(lab for lab in inst.operand_labels[0] if lab not in inst.labels)
            out_labels = tuple(inst.labels)
            labels = out_labels[:-1] + k + out_labels[-1:] if out_labels else k
            loop = self.nest(labels, Accumulate(name, index, "sum", Op("mul", (a, b), dtype), unit="matrix"))
            return [init, loop]
        return [self.nest(inst.labels, Store(name, index, self.expr(inst)))]

    def operands(self, inst: Instance) -> list[Expr]:
        out = []
        for (kind, ref), labels, child in zip(inst.operands, inst.operand_labels, inst.node.children):
            if kind == "const":
                out.append(Lit(ref, self.types[child].dtype))
            elif kind == "global":
                if ref in self.staged:
                    out.append(Load(self.staged[ref], self.staged_index(ref, labels)))
                else:
                    out.append(Load(self.names[ref], self.global_index(labels)))
            elif kind == "inline":
                out.append(self.expr(self.k.instances[ref]))
            else:
                out.append(Load(self.held[ref], self.global_index(labels)))
        return out

    def staged_index(self, cid: str, labels) -> tuple[Ix, ...]:
        if cid in self.resident:
            return self.global_index(labels)
        return self.local_index(labels)

    def expr(self, inst: Instance) -> Expr:
        """The value of an elementwise or layout instance as an expression over its own axes."""
        op = inst.node.op
        dtype = self.types[inst.cid].dtype
        args = self.operands(inst)
        if op == "cast":
            return Op("cast", tuple(args), dtype)
        if op in ("transpose", "broadcast_to"):
            return args[0]
        if op == "reshape":
            (kind, ref), = inst.operands
            out = self.types[inst.cid].shape
            if kind != "global" or ref in self.staged:
                raise NotImplementedError("reshape of a value computed in the same kernel")
            return Load(self.names[ref], self.global_index(inst.labels), view=tuple(out))
        return Op(op, tuple(args), dtype)
