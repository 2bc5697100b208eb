"""Pictures a person can read: the schedule and the e-graph as Graphviz, rendered when `dot` is installed.

- `schedule_dot`: each kernel a box listing its ops and their placements (the
  `--emit schedule` text of the kernel), each global tensor an edge from the
  kernel that writes it (or the parameter) to every kernel that reads it (or
  the output), labelled with its name, type and bytes; `focus` draws one kernel
  (or a tensor's kernels) and the kernels next to it.
- `egraph_dot`: the e-classes of values only (egglog's own picture also draws
  every analysis table: 135 clusters for a 2-op program), each a cluster of
  the ways to compute it, those that differ only in their operands'
  placements drawn as one box; the placement e-classes are the labels of the
  arrows from a box to its operands' values (`global|local`), and a legend;
  `focus` draws the values an op (or one e-class) computes and their
  operands and readers.
- `write_picture`: `.svg`, `.png` or `.pdf` are rendered by graphviz's `dot`
  (Debian package `graphviz`, optional); without it, or for any other name,
  the DOT text is written (beside the requested name, as `.dot`).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from .ir.errors import StitchError
from .rewrite.egraph_data import EGraphData, ENode
from .rewrite.placement import Placement

PLACEMENT_COLORS = {Placement.GLOBAL: "#6b7280", Placement.SHARED: "#2563eb", Placement.LOCAL: "#16a34a",
                    Placement.INLINE: "#ea580c"}
RENDERED = (".svg", ".png", ".pdf")
RENDER_SECONDS = 120


def schedule_dot(compiled, focus: str | None = None) -> str:
    """The schedule of a `pipeline.Compiled` as DOT: kernels as boxes, global tensors as edges; with
    `focus` (a kernel, `k3`, or a global tensor's name, `t5`), only it and the kernels next to it."""
    from .schedule.schedule_print import global_names, print_kernel

    schedule, cost, graph = compiled.schedule, compiled.cost, compiled.graph
    names = global_names(schedule)
    types = {name: t for name, t in zip(graph.param_names, graph.param_types)}
    shown = range(len(schedule.kernels)) if focus is None else _kernels_around(focus, schedule, names)
    writer = {}
    lines = _head(f"schedule of {graph.name} on {compiled.target.name}: {len(schedule.kernels)} kernel(s), "
                  f"{_bytes(cost.global_bytes)} global bytes (compulsory {_bytes(cost.compulsory_bytes)})"
                  + (f", around {focus}" if focus else ""))
    lines.append('  node [shape=box, fontname="monospace", fontsize=10];')
    lines.append('  edge [fontname="Helvetica", fontsize=9];')
    for i, (k, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        for cid in k.roots:  # a kernel may write several values
            writer[names[cid]] = _id("k", i)
            types[names[cid]] = schedule.types[cid]
        if i not in shown:
            continue
        text = [line for line in print_kernel(i, k, kc, names, schedule) if not line.startswith("  in ")]
        color = "#dc2626" if kc.price.problem else "#111827"
        label = _quote("\n".join(text) + "\n", left=True)
        lines.append(f"  {_id('k', i)} [label={label}, color={_quote(color)}];")
    drawn = {_id("k", i) for i in shown}
    sources = set()

    def source(name: str) -> str:
        """Where a tensor comes from: its kernel when drawn, else an ellipse of its own."""
        node = writer.get(name)
        if node in drawn:
            return node
        if name not in sources:
            sources.add(name)
            what = name if node is None else f"{name} (from {node.strip(chr(34)).replace(':', '')})"
            lines.append(f'  {_id("in", name)} [label={_quote(what)}, shape=ellipse, fontname="Helvetica"];')
        return _id("in", name)

    for i, k in enumerate(schedule.kernels):
        if i in shown:
            for cid in k.inputs:
                name = names.get(cid, cid)
                lines.append(f"  {source(name)} -> {_id('k', i)} [label={_quote(_tensor(name, types))}];")
    for j, cid in enumerate(schedule.outputs):
        name = names[cid]
        if focus is None or writer.get(name) in drawn:
            lines.append(f'  {_id("out", j)} [label={_quote(f"returned {j}")}, shape=ellipse, style=bold, '
                         'fontname="Helvetica"];')
            lines.append(f"  {source(name)} -> {_id('out', j)} [label={_quote(_tensor(name, types))}];")
    return "\n".join(lines + ["}"]) + "\n"


def _kernels_around(focus: str, schedule, names: dict[str, str]) -> set[int]:
    """The kernel `focus` names (`k3`), or the one writing the tensor it names, with the kernels that
    write what it reads and read what it writes."""
    kernels = schedule.kernels
    by_name = {name: cid for cid, name in names.items()}
    if re.fullmatch(r"k\d+", focus) and int(focus[1:]) < len(kernels):
        centre = {int(focus[1:])}
    elif focus in by_name:
        cid = by_name[focus]
        centre = {i for i, k in enumerate(kernels) if cid in k.roots or cid in k.inputs}
    else:
        raise StitchError(f"--focus {focus}: no kernel or global tensor of that name in the schedule",
                          hint=f"kernels k0..k{len(kernels) - 1}; tensors {', '.join(sorted(by_name))}")
    out = set(centre)
    for i in centre:
        for j, other in enumerate(kernels):
            if set(kernels[i].inputs) & set(other.roots) or set(other.inputs) & set(kernels[i].roots):
                out.add(j)
    return out


def egraph_dot(data: EGraphData, title: str = "e-graph", focus: str | None = None) -> str:
    """The value e-classes of an e-graph as DOT, with a legend: each a box holding its e-nodes, the
    e-nodes that differ only in their operands' placements drawn once (the placement e-classes
    become the labels of the arrows: `global|local` where an operand may be read either way); an
    arrow from an e-node to each operand's value. With `focus` (an e-class id or an op name), only
    the values it names and their operands and readers."""
    wrapped = {cid: nodes[0] for cid, nodes in data.classes.items() if nodes and all(n.is_placement for n in nodes)}

    def value_of(child: str) -> tuple[str | None, str]:
        node = wrapped.get(child)
        return (node.op, node.children[0]) if node is not None else (None, child)

    values = [cid for cid in data.classes if cid not in wrapped]
    groups: dict[str, dict[tuple, list[set]]] = {}  # value -> e-node up to placements -> each operand's
    counts: dict[tuple, int] = {}  # (value, e-node up to placements) -> e-nodes merged into it
    for cid in values:
        by_shape: dict[tuple, list[set]] = {}
        for node in data.classes[cid]:
            operands = [value_of(c) for c in node.children]
            key = (node.ctor, node.op, node.attrs, tuple(v for _, v in operands))
            seen = by_shape.setdefault(key, [set() for _ in operands])
            counts[cid, key] = counts.get((cid, key), 0) + 1
            for i, (placement, _) in enumerate(operands):
                seen[i].add(placement or "value")
        groups[cid] = by_shape
    shown = set(values) if focus is None else _focused(focus, values, groups, data)
    drawn = sum(len(groups[cid]) for cid in shown)
    lines = _head(f"{title}: {len(values)} values ({data.enode_count} e-nodes, placements included); {drawn} "
                  "drawn, those that differ only in placements as one" + (f", around {focus}" if focus else ""))
    lines += ["  compound=true;", '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica",'
              " fontsize=10];", '  edge [fontname="Helvetica", fontsize=8];']
    roots, first, cluster = set(data.roots), {}, {}
    for n, cid in enumerate(c for c in values if c in shown):
        cluster[cid] = n
        shape = f": {data.types[cid]}" if cid in data.types else ""
        lines += [f"  subgraph cluster_{n} {{",
                  f"    label={_quote(f'{cid}{shape}' + (' (output)' if cid in roots else ''))};",
                  '    color="#111827"; fontsize=9; style="rounded";' + (" penwidth=2;" if cid in roots else "")]
        for m, key in enumerate(groups[cid]):
            ctor, op, attrs, _ = key
            nid = _id(f"c{n}n", m)
            first.setdefault(cid, nid)
            variants = counts[cid, key]
            text = _enode_text(ENode(ctor, op, (), attrs))
            more = f"\n({variants} placement alternatives)" if variants > 1 else ""
            lines.append(f"    {nid} [label={_quote(text + more)}];")
        lines.append("  }")
    for cid in (c for c in values if c in shown):
        n = cluster[cid]
        for m, ((_, _, _, operands), placements) in enumerate(groups[cid].items()):
            for operand, held in zip(operands, placements):
                if operand not in first:
                    continue
                label = "|".join(sorted(held - {"value"}))
                color = f", color={_quote(PLACEMENT_COLORS[Placement(next(iter(held)))])}" if (
                    len(held) == 1 and "value" not in held) else ""
                lines.append(f"  {_id(f'c{n}n', m)} -> {first[operand]} [lhead=cluster_{cluster[operand]}, "
                             f"label={_quote(label)}{color}];")
    lines += _legend()
    return "\n".join(lines + ["}"]) + "\n"


def _focused(focus: str, values: list[str], groups: dict, data: EGraphData) -> set[str]:
    """The values `focus` names (an e-class id, or every value computed by an op of that name) and
    their operands and readers."""
    named = {focus} if focus in groups else {cid for cid in values if any(k[1] == focus for k in groups[cid])}
    if not named:
        ops = sorted({k[1] for cid in values for k in groups[cid]})
        raise StitchError(f"--focus {focus}: no e-class id or op of that name in the e-graph",
                          hint=f"its ops: {', '.join(ops)}")
    out = set(named)
    for cid in values:
        operands = {v for key in groups[cid] for v in key[3]}
        if cid in named:
            out |= operands
        elif operands & named:
            out.add(cid)
    return out


def _enode_text(node) -> str:
    if node.op == "param":
        return f"param {node.attr('name')}"
    if node.op == "const":
        return f"{_attr(node.attr('value'))}: {node.attr('dtype')}"
    attrs = " ".join(f"{k}={_attr(v)}" for k, v in node.attrs)
    return f"{node.op} {attrs}" if attrs else node.op


def _legend() -> list[str]:
    items = [("value", "an e-class: one value; each box in it one way to compute it (the ways that differ only "
                       "in their operands' placements drawn as one)", "#111827", "rounded")]
    items += [(p.value, f"an arrow so labelled: the operand may be {READ[p]}", PLACEMENT_COLORS[p],
               "dashed,rounded") for p in HELD]
    items.append(("arrow", "from a way of computing a value to each operand's value, labelled with the "
                           "placements it may be read with", "#ffffff", "solid"))
    lines = ["  subgraph cluster_legend {", '    label="legend"; fontsize=10; style=rounded; color="#9ca3af";',
             '    node [shape=box, fontsize=9];']
    for i, (name, meaning, color, style) in enumerate(items):
        lines.append(f"    legend{i} [label={_quote(f'{name}: {meaning}')}, color={_quote(color)}, "
                     f"style={_quote(style)}];")
    lines.append("    " + " -> ".join(f"legend{i}" for i in range(len(items))) + " [style=invis];")  # one column
    lines.append("  }")
    return lines


HELD = {Placement.GLOBAL: "in global memory (a kernel boundary)", Placement.SHARED: "on chip for the whole tile",
        Placement.LOCAL: "tile by tile in registers", Placement.INLINE: "recomputed at each use"}
READ = {Placement.GLOBAL: "read from global memory (a kernel boundary)",
        Placement.SHARED: "held on chip for the whole tile", Placement.LOCAL: "held tile by tile in registers",
        Placement.INLINE: "recomputed at each use"}
assert set(HELD) == set(READ) == set(PLACEMENT_COLORS) == set(Placement)


def write_picture(path: str, dot: str) -> str:
    """Write `dot` as the file `path` asks for; the note to print when it could not be rendered, else ''."""
    from .files import write_text

    target = Path(path)
    if target.suffix.lower() not in RENDERED:
        write_text(path, dot)
        return ""
    exe = shutil.which("dot")
    if exe is None:
        fallback = str(target.with_suffix(".dot"))
        write_text(fallback, dot)
        return (f"note: graphviz's dot is not installed, so the picture is DOT text in {fallback} "
                f"(install the graphviz package, or render it elsewhere: dot -T{target.suffix[1:]} {fallback})")
    try:
        proc = subprocess.run([exe, f"-T{target.suffix[1:].lower()}", "-o", path], input=dot, capture_output=True,
                              text=True, timeout=RENDER_SECONDS)
    except subprocess.TimeoutExpired:
        raise StitchError(f"{path}: graphviz's dot ran over {RENDER_SECONDS} s (a very large picture: "
                          "write .dot instead)") from None
    if proc.returncode != 0:
        raise StitchError(f"{path}: graphviz's dot failed: {proc.stderr.strip()[:500]}")
    return ""


def _head(title: str) -> list[str]:
    return ["digraph stitch {", "  rankdir=TB;", f"  label={_quote(title)}; labelloc=t; fontname=\"Helvetica\";"]


def _tensor(name: str, types: dict) -> str:
    t = types.get(name)
    return f"{name}: {t}, {_bytes(t.nbytes)} B" if t is not None else name


def _attr(value) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(str, value)) + "]"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _id(prefix: str, key) -> str:
    return _quote(f"{prefix}:{key}")


def _quote(text: str, left: bool = False) -> str:
    """A DOT string; `left` makes each line left-justified (a `\\l` ends it)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + (escaped.replace("\n", "\\l") if left else escaped.replace("\n", "\\n")) + '"'


def _bytes(n) -> str:
    """A byte count with thousands separators; a symbolic one as its expression."""
    return f"{n:,}" if type(n) is int else str(n)

