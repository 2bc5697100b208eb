"""The text and JSON forms of a priced schedule (`--emit schedule`, `--json`).

The text has a structural form (`prices=False`): the kernels, their plans and their instances
without the price (cycles, bytes, on-chip footprint), so that a test pinning how a program fuses
and tiles does not change when the cost model's numbers do."""

from __future__ import annotations

from collections.abc import Callable

from ..ir.dims import bare_symbol
from ..ir.extent import dim_of, is_symbolic
from ..ir.printer import print_attr_value, print_scalar
from .cost import KernelCost, ScheduleCost
from .index import FloorDiv, Indirect, Ix, Mod
from .kernel import Instance, Kernel, RefKind, Schedule
from .maps import GatherRef
from .plan import KernelPlan, count_tiles
from .split import planned_kernel, split_text


def global_names(schedule: Schedule) -> dict[str, str]:
    """A name for every value in global memory: parameters, outputs, intermediates."""
    names = dict(schedule.params)
    for i, cid in enumerate(schedule.outputs):
        names.setdefault(cid, f"out{i}")
    for k in schedule.kernels:
        for cid in k.roots:
            names.setdefault(cid, f"t{len(names)}")
    return names


def planning_sizes(schedule: Schedule) -> dict[str, int]:
    """The symbols of a symbolic schedule at the values it was planned at ({} for a static one)."""
    out = {}
    for t in schedule.types.values():
        for d in t.shape:
            name = bare_symbol(dim_of(d)) if is_symbolic(d) else None
            if name is not None:
                out[name] = d.value
    return dict(sorted(out.items()))


def print_schedule(name: str, target_name: str, schedule: Schedule, cost: ScheduleCost, clock_ghz: float,
                   prices: bool = True) -> str:
    """The schedule as `--emit schedule` prints it; without its prices, its structural form."""
    names = global_names(schedule)
    head = f"schedule {name} on {target_name}: {len(schedule.kernels)} kernel(s)"
    if prices:
        us = cost.cycles / (clock_ghz * 1e3)
        # (compulsory counts every parameter whole: a gather or a slice reads only part of one)
        part = ", parameters counted whole: this schedule reads part of some" if (
            cost.global_bytes < cost.compulsory_bytes) else ""
        head += (f", global bytes {cost.global_bytes} (compulsory {cost.compulsory_bytes}{part}), "
                 f"estimated {cost.cycles:.4g} cycles ({us:.4g} us)")
        sizes = planning_sizes(schedule)
        if sizes:  # (symbolic: the figures are the planning size's, engine/ir/extent.py)
            head += " at " + ", ".join(f"{k} = {v}" for k, v in sizes.items())
    lines = [head]
    for i, (k, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        lines.append("")
        lines.extend(print_kernel(i, k, kc, names, schedule, prices))
    if cost.problems:
        lines.append("")
        lines.extend(f"infeasible: {p}" for p in cost.problems)
    return "\n".join(lines) + "\n"


def print_kernel(index: int, k: Kernel, kc: KernelCost, names: dict[str, str], schedule: Schedule,
                 prices: bool = True) -> list[str]:
    plan, price = kc.plan, kc.price
    split = f"  axes split: {split_text(k, plan.splits)}" if plan.splits else ""
    k = planned_kernel(k, plan)  # (its axes split as the plan says)
    space = ", ".join(f"{a}={k.extents[a]}" for a in plan.parallel) or "one tile"
    tile = ", ".join(str(plan.tile[a]) for a in plan.parallel)
    writes = ", ".join(f"{names[c]}: {schedule.types[c]}" for c in k.roots)
    tiles = (f"  tiles over [{space}]" + (f" by [{tile}]" if plan.parallel else "")
             + f": {count_tiles(k, plan.spread)} tile(s)")
    ordered = k.ordered()
    number = {inst.key: i for i, inst in enumerate(ordered)}
    lines = [f"kernel k{index} -> {writes}"] + ([split] if split else [])
    if prices:
        lines += [tiles + f", on-chip {price.footprint} B per tile",
                  f"  reads {price.bytes_read} B, writes {price.bytes_written} B, {price.cycles:.4g} cycles"]
    else:
        lines.append(tiles)
        lines.extend(_plan_lines(plan, names, number))
    if price.problem:
        lines.append(f"  infeasible: {price.problem}")
    computed = {}
    for inst in ordered:
        computed.setdefault(inst.cid, f"%{number[inst.key]}")

    def value_name(cid: str) -> str:
        """A gathered index's indices: by their global name, or the instance computing them here."""
        return names.get(cid) or computed.get(cid, cid)

    for cid, reads in k.inputs.items():
        at = "; ".join(dict.fromkeys(_index(r.index, value_name) for r in reads))
        lines.append(f"  in  {names.get(cid, cid)}: {schedule.types[cid]}  [{at}]")
    stored = {key: names[cid] for cid, key in zip(k.roots, k.stores)}
    for inst in ordered:
        line = "  " + print_instance(inst, names, number, value_name)
        if inst.key in stored and inst.hold.value != "root":
            line += f", stored to {stored[inst.key]}"
        lines.append(line)
    return lines


def _plan_lines(plan: KernelPlan, names: dict[str, str], number: dict[int, int]) -> list[str]:
    """The plan's decisions besides its tiles, one line each where it makes any."""
    def values(keys) -> str:
        return ", ".join(f"%{n}" for n in sorted(number[key] for key in keys))

    lines = []
    if plan.resident:
        lines.append(f"  held whole: {', '.join(sorted(names.get(c, c) for c in plan.resident))}")
    if plan.staged:
        lines.append(f"  staged per tile: {', '.join(names.get(s.cid, s.cid) for s in plan.staged)}")
    if plan.chunked:
        lines.append(f"  {plan.chunked} in chunks of {plan.tile[plan.chunked]}")
    if plan.partial:
        lines.append(f"  split across tiles: {values(plan.partial)}, then {values(plan.epilogue) or 'nothing'}")
    if plan.packed:
        lines.append(f"  right operand packed per tile: {values(plan.packed)}")
    return lines


def print_instance(inst: Instance, names: dict[str, str], number: dict[int, int],
                   value_name: Callable[[str], str] = str) -> str:
    args = []
    for ref in inst.operands:
        if ref.kind is RefKind.CONST:
            args.append(print_scalar(ref.target))
        elif ref.kind is RefKind.GLOBAL:
            args.append(f"global {names.get(ref.target, ref.target)}")
        else:
            args.append(f"{ref.hold.value} %{number[ref.key]}")
    attrs = [f"{k}={print_attr_value(v)}" for k, v in inst.node.attrs if inst.node.op not in ("param", "const")]
    call = f"{inst.node.op}({', '.join(args + attrs)})"
    return f"%{number[inst.key]} = {call:<44} [{_index(inst.index, value_name)}]  {inst.hold.value}"


def _index(index: tuple[Ix, ...], value_name: Callable[[str], str] = str) -> str:
    """An index as text, a gathered index shown as its indices' name read at its position
    (`idx<100>(ids[p0, p1])`)."""
    return ", ".join(str(_named(ix, value_name)) for ix in index)


class _Text(str):
    """Text standing in for a gathered index's value when an index prints."""


def _named(ix: Ix, value_name: Callable[[str], str]) -> Ix:
    def atom(t):
        if isinstance(t, Indirect) and isinstance(t.value, GatherRef):
            ref = t.value
            return Ix.var(Indirect(_Text(f"{value_name(ref.indices)}[{_index(ref.index, value_name)}]"), t.extent))
        if isinstance(t, (FloorDiv, Mod)):
            return Ix.var(type(t)(_named(t.x, value_name), t.d))
        return Ix.var(t)

    return ix.map_atoms(atom)


def schedule_json(schedule: Schedule, cost: ScheduleCost) -> dict:
    names = global_names(schedule)
    kernels = []
    for i, (k, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        k = planned_kernel(k, kc.plan)
        kernels.append(
            {
                "name": f"k{i}",
                "writes": [names[c] for c in k.roots],
                "ops": [inst.node.op for inst in k.ordered()],
                "placements": [inst.hold.value for inst in k.ordered()],
                "reads": [names.get(c, c) for c in k.inputs],
                "parallel_axes": [k.extents[a] for a in kc.plan.parallel],
                "tile": [kc.plan.tile[a] for a in kc.plan.parallel],
                "tiles": kc.price.tiles,
                "onchip_bytes": kc.price.footprint,
                "bytes_read": kc.price.bytes_read,
                "bytes_written": kc.price.bytes_written,
                "cycles": None if kc.price.problem else kc.price.cycles,
                "problem": kc.price.problem or None,
            }
        )
    return {
        "kernels": kernels,
        "kernel_count": len(kernels),
        "global_bytes": cost.global_bytes,
        "compulsory_bytes": cost.compulsory_bytes,
        "cycles": None if cost.problems else cost.cycles,
        "feasible": cost.feasible,
    }
