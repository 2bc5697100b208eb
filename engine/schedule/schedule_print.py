"""The text and JSON forms of a priced schedule (`--emit schedule`, `--json`)."""

from __future__ import annotations

from collections.abc import Callable

from ..ir.printer import print_attr_value, print_scalar
from .cost import KernelCost, ScheduleCost
from .index import FloorDiv, Indirect, Ix, Mod
from .kernel import Instance, Kernel, Schedule
from .maps import GatherRef


def global_names(schedule: Schedule) -> dict[str, str]:
    """A name for every value in global memory: parameters, outputs, intermediates."""
    names = dict(schedule.params)
    for i, cid in enumerate(schedule.outputs):
        names.setdefault(cid, f"out{i}")
    for k in schedule.kernels:
        for cid in k.roots:
            names.setdefault(cid, f"t{len(names)}")
    return names


def print_schedule(name: str, target_name: str, schedule: Schedule, cost: ScheduleCost, clock_ghz: float) -> str:
    names = global_names(schedule)
    us = cost.cycles / (clock_ghz * 1e3)
    head = (
        f"schedule {name} on {target_name}: {len(schedule.kernels)} kernel(s), "
        f"global bytes {cost.global_bytes} (compulsory {cost.compulsory_bytes}), "
        f"estimated {cost.cycles:.4g} cycles ({us:.4g} us)"
    )
    lines = [head]
    for i, (k, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        lines.append("")
        lines.extend(print_kernel(i, k, kc, names, schedule))
    if cost.problems:
        lines.append("")
        lines.extend(f"infeasible: {p}" for p in cost.problems)
    return "\n".join(lines) + "\n"


def print_kernel(index: int, k: Kernel, kc: KernelCost, names: dict[str, str], schedule: Schedule) -> list[str]:
    space = ", ".join(f"{a}={k.extents[a]}" for a in kc.parallel) or "one tile"
    tile = ", ".join(str(kc.tile[a]) for a in kc.parallel)
    writes = ", ".join(f"{names[c]}: {schedule.types[c]}" for c in k.roots)
    lines = [
        f"kernel k{index} -> {writes}",
        f"  tiles over [{space}]" + (f" by [{tile}]" if kc.parallel else "") + f": {kc.tiles} tile(s), "
        f"on-chip {kc.footprint} B per tile",
        f"  reads {kc.bytes_read} B, writes {kc.bytes_written} B, {kc.cycles:.4g} cycles",
    ]
    if kc.problem:
        lines.append(f"  infeasible: {kc.problem}")
    ordered = k.ordered()
    number = {inst.key: i for i, inst in enumerate(ordered)}
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


def print_instance(inst: Instance, names: dict[str, str], number: dict[int, int],
                   value_name: Callable[[str], str] = str) -> str:
    args = []
    for kind, ref in inst.operands:
        if kind == "const":
            args.append(print_scalar(ref))
        elif kind == "global":
            args.append(f"global {names.get(ref, ref)}")
        else:
            args.append(f"{kind} %{number[ref]}")
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
        kernels.append(
            {
                "name": f"k{i}",
                "writes": [names[c] for c in k.roots],
                "ops": [inst.node.op for inst in k.ordered()],
                "placements": [inst.hold.value for inst in k.ordered()],
                "reads": [names.get(c, c) for c in k.inputs],
                "parallel_axes": [k.extents[a] for a in kc.parallel],
                "tile": [kc.tile[a] for a in kc.parallel],
                "tiles": kc.tiles,
                "onchip_bytes": kc.footprint,
                "bytes_read": kc.bytes_read,
                "bytes_written": kc.bytes_written,
                "cycles": None if kc.problem else kc.cycles,
                "problem": kc.problem or None,
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
