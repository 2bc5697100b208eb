"""Pictures a person can read: the schedule and the e-graph as Graphviz, rendered when `dot` is installed.

- `schedule_dot`: each kernel a box listing its ops and their placements (the
  `--emit schedule` text of the kernel), each global tensor an edge from the
  kernel that writes it (or the parameter) to every kernel that reads it (or
  the output), labelled with its name, type and bytes.
- `egraph_dot`: the e-classes of values and of placements only (egglog's own
  picture also draws every analysis table: 135 clusters for a 2-op program),
  each a box holding its e-nodes, an arrow from an e-node to each operand
  e-class, placements coloured by kind, and a legend.
- `write_picture`: `.svg`, `.png` or `.pdf` are rendered by graphviz's `dot`
  (Debian package `graphviz`, optional); without it, or for any other name,
  the DOT text is written (beside the requested name, as `.dot`).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .ir.errors import StitchError
from .rewrite.egraph_data import EGraphData
from .rewrite.placement import Placement

PLACEMENT_COLORS = {Placement.GLOBAL: "#6b7280", Placement.SHARED: "#2563eb", Placement.LOCAL: "#16a34a",
                    Placement.INLINE: "#ea580c"}
RENDERED = (".svg", ".png", ".pdf")
RENDER_SECONDS = 120


def schedule_dot(compiled) -> str:
    """The schedule of a `pipeline.Compiled` as DOT: kernels as boxes, global tensors as edges."""
    from .schedule.schedule_print import global_names, print_kernel

    schedule, cost, graph = compiled.schedule, compiled.cost, compiled.graph
    names = global_names(schedule)
    types = {name: t for name, t in zip(graph.param_names, graph.param_types)}
    writer = {}
    lines = _head(f"schedule of {graph.name} on {compiled.target.name}: {len(schedule.kernels)} kernel(s), "
                  f"{_bytes(cost.global_bytes)} global bytes (compulsory {_bytes(cost.compulsory_bytes)})")
    lines.append('  node [shape=box, fontname="monospace", fontsize=10];')
    lines.append('  edge [fontname="Helvetica", fontsize=9];')
    for name in graph.param_names:
        lines.append(f'  {_id("in", name)} [label={_quote(name)}, shape=ellipse, fontname="Helvetica"];')
    for i, (k, kc) in enumerate(zip(schedule.kernels, cost.kernels)):
        text = [line for line in print_kernel(i, k, kc, names, schedule) if not line.startswith("  in ")]
        for cid in k.roots:  # a kernel may write several values
            writer[names[cid]] = _id("k", i)
            types[names[cid]] = schedule.types[cid]
        color = "#dc2626" if kc.price.problem else "#111827"
        label = _quote("\n".join(text) + "\n", left=True)
        lines.append(f"  {_id('k', i)} [label={label}, color={_quote(color)}];")
    outputs = [names[cid] for cid in schedule.outputs]
    for j, name in enumerate(outputs):
        lines.append(f'  {_id("out", j)} [label={_quote(f"returned {j}")}, shape=ellipse, style=bold, '
                     'fontname="Helvetica"];')
    for i, k in enumerate(schedule.kernels):
        for cid in k.inputs:
            name = names.get(cid, cid)
            lines.append(f"  {writer.get(name, _id('in', name))} -> {_id('k', i)} "
                         f"[label={_quote(_tensor(name, types))}];")
    for j, name in enumerate(outputs):
        lines.append(f"  {writer.get(name, _id('in', name))} -> {_id('out', j)} "
                     f"[label={_quote(_tensor(name, types))}];")
    return "\n".join(lines + ["}"]) + "\n"


def egraph_dot(data: EGraphData, title: str = "e-graph") -> str:
    """The value and placement e-classes of an e-graph as DOT, with a legend."""
    lines = _head(f"{title}: {len(data.classes)} e-classes, {data.enode_count} e-nodes "
                  "(values and placements; analyses not drawn)")
    lines += ["  compound=true;", '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica",'
              " fontsize=10];"]
    first = {}
    roots = set(data.roots)
    for n, (cid, nodes) in enumerate(data.classes.items()):
        placement = next((node.op for node in nodes if node.is_placement), None)
        color = PLACEMENT_COLORS[placement] if placement else "#111827"
        shape = f": {data.types[cid]}" if cid in data.types else ""
        label = f"{placement} edge" if placement else "value"
        lines += [f"  subgraph cluster_{n} {{",
                  f"    label={_quote(f'{label}{shape}' + (' (output)' if cid in roots else ''))};",
                  f'    color={_quote(color)}; fontcolor={_quote(color)}; fontsize=9;'
                  + (' style="dashed,rounded";' if placement else ' style="rounded";')
                  + (" penwidth=2;" if cid in roots else "")]
        for m, node in enumerate(nodes):
            nid = _id(f"c{n}n", m)
            first.setdefault(cid, nid)
            text = _enode_text(node)
            style = f", color={_quote(PLACEMENT_COLORS[node.op])}" if node.is_placement else ""
            lines.append(f"    {nid} [label={_quote(text)}{style}];")
        lines.append("  }")
    cluster = {cid: n for n, cid in enumerate(data.classes)}
    for n, (cid, nodes) in enumerate(data.classes.items()):
        for m, node in enumerate(nodes):
            for child in node.children:
                if child in first:
                    lines.append(f"  {_id(f'c{n}n', m)} -> {first[child]} [lhead=cluster_{cluster[child]}];")
    lines += _legend()
    return "\n".join(lines + ["}"]) + "\n"


def _enode_text(node) -> str:
    if node.op == "param":
        return f"param {node.attr('name')}"
    if node.op == "const":
        return f"{_attr(node.attr('value'))}: {node.attr('dtype')}"
    attrs = " ".join(f"{k}={_attr(v)}" for k, v in node.attrs)
    return f"{node.op} {attrs}" if attrs else node.op


def _legend() -> list[str]:
    items = [("value", "e-class of a value: each e-node inside computes it", "#111827", "rounded")]
    items += [(p.value, f"e-class of {'an' if p is Placement.INLINE else 'a'} {p} edge: the value it points to, held {HELD[p]}",
               PLACEMENT_COLORS[p], "dashed,rounded") for p in HELD]
    items.append(("arrow", "from an e-node to each of its operands' e-classes", "#ffffff", "solid"))
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
assert set(HELD) == set(PLACEMENT_COLORS) == set(Placement)


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

