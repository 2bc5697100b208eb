"""Keep a program's `#` comments with its statements, so that `stitch fmt` prints them back.

The grammar ignores comments, and `.ir` has no string literals, so every `#`
starts one: they are found again by scanning the text once it has parsed. Each
is attached by its line to the statement it belongs to:

- a comment at the end of a statement's last line is that statement's `after`
  comment (the func header's `{` line, an assignment, the return, the `}`);
- any other comment inside a func goes `before` the statement it precedes, or
  the one it sits inside (a comment between the lines of a long call moves
  above it), or before the closing `}` after the return;
- comments above a func go before it, comments after the last func stay at the
  end of the program.

Blank lines are not kept: the printer's layout is canonical.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, replace

from .program import Comments, Func

COMMENT = re.compile(r"#[^\n]*")


@dataclass(frozen=True)
class FuncLines:
    """Where one parsed func's parts are, by line."""

    start: int  # the func's name
    open: int  # its `{`
    statements: tuple[tuple[int, int], ...]  # first and last line of each assignment, then of the return
    close: int  # its `}`


def find_comments(text: str) -> list[tuple[int, str]]:
    """(line, text) of every comment, in order; trailing whitespace (a CRLF's CR) dropped."""
    found, line, at = [], 1, 0
    for m in COMMENT.finditer(text):
        line += text.count("\n", at, m.start())
        at = m.start()
        found.append((line, m.group().rstrip()))
    return found


def attach_comments(funcs: list[Func], lines: list[FuncLines],
                    comments: list[tuple[int, str]]) -> tuple[list[Func], tuple[str, ...]]:
    """The funcs with their comments attached, and the comments after the last func."""
    out, at = [], 0
    for func, where in zip(funcs, lines):
        above = []
        while at < len(comments) and comments[at][0] < where.start:
            above.append(comments[at][1])
            at += 1
        inside = []
        while at < len(comments) and comments[at][0] <= where.close:
            inside.append(comments[at])
            at += 1
        out.append(_attach(func, where, above, inside))
    return out, tuple(text for _, text in comments[at:])


def _attach(func: Func, where: FuncLines, above: list[str], inside: list[tuple[int, str]]) -> Func:
    n = len(where.statements)
    before: list[list[str]] = [[] for _ in range(n + 1)]  # the statements, then the closing `}`
    after = [""] * (n + 1)
    header_after = ""
    lasts = [last for _, last in where.statements]  # non-decreasing: statements follow one another
    ending = {last: i for i, last in enumerate(lasts)}  # the last statement ending on a line
    for line, text in inside:
        if line in ending:
            after[ending[line]] = text
        elif line == where.close:
            after[n] = text
        elif line < where.open:  # inside a header written over several lines
            above.append(text)
        elif line == where.open and where.statements[0][0] > line:
            header_after = text
        else:  # the statement it sits in, or the next one (the `}` after the return)
            before[bisect.bisect_left(lasts, line)].append(text)
    body = tuple(replace(a, comments=Comments(tuple(before[i]), after[i])) for i, a in enumerate(func.body))
    return replace(func, body=body, comments=Comments(tuple(above), header_after),
                   return_comments=Comments(tuple(before[n - 1]), after[n - 1]),
                   end_comments=Comments(tuple(before[n]), after[n]))
