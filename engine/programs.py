"""Reading a program: a `.ir` file or text parsed, and the func a command runs checked.

Kept apart from pipeline.py, which imports every stage (the e-graph's egglog among them), so that
the commands that only read and check a program (`stitch check`, `fmt`, `eval`) start at once.
"""

from __future__ import annotations

from pathlib import Path

from .ir.check import check_program
from .ir.errors import StitchError
from .ir.graph import Graph
from .ir.parse import parse_file, parse_program
from .ir.program import Pos, Program


def read_program(source: str | Path) -> Program:
    """A program from `.ir` text (a string holding a func) or from the path of a `.ir` file."""
    if isinstance(source, str) and "func" in source and "{" in source:
        return parse_program(source, "<string>")
    return read_file(source)


def read_file(path: str | Path) -> Program:
    """The program in a `.ir` file; a file that defines no func is an error at its first line."""
    program = parse_file(path)
    if not program.funcs:
        hint = "a program is one or more `func NAME(PARAMS) -> TYPE { ... }`"
        raise StitchError("the file defines no func", Pos(str(path), 1, 1), program.source, hint)
    return program


def check_entry(program: Program, entry: str | None = None, filename: str | None = None) -> Graph:
    """The checked graph of the func named `entry` (default: the first); every func is checked.

    `filename`, when given, names the file in the error for an unknown entry."""
    graphs = check_program(program)
    if not graphs:
        raise StitchError("the program defines no func")
    if entry is None:
        return next(iter(graphs.values()))
    if entry not in graphs:
        if filename is not None:
            raise StitchError(f"{filename}: no func named '{entry}' (the file defines {', '.join(graphs)})")
        raise StitchError(f"no func named '{entry}' (the program defines {', '.join(graphs)})")
    return graphs[entry]
