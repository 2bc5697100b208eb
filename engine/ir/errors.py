"""User-facing errors: one paragraph naming file:line:col, the line and a caret."""

from __future__ import annotations

import unicodedata

from .program import NOPOS, Pos


class StitchError(Exception):
    """An error in something the user wrote (a program, a rule, a target, inputs).

    The CLI prints `str(err)` and exits 1; it never shows a traceback for these.
    """

    def __init__(self, message: str, pos: Pos = NOPOS, source: str = "", hint: str = ""):
        self.message = message
        self.pos = pos
        self.source = source
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        if self.pos.line:
            head = f"{self.pos}: error: {self.message}"
        elif self.pos.file != NOPOS.file:  # about a whole file: it cannot be read, say
            head = f"{self.pos.file}: error: {self.message}"
        else:
            head = f"error: {self.message}"
        lines = [head]
        snippet = caret_context(self.source, self.pos)
        if snippet:
            lines.append(snippet)
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


class StitchWarning(UserWarning):
    """Something the user should know that does not stop the command (saturation cut short by a limit).

    Raised through `warnings.warn`, so API users can filter it; the CLI prints it as `warning: ...`."""


def caret_context(source: str, pos: Pos) -> str:
    """The source line at `pos` and a caret under its column.

    Lines are counted as the parser counts them (only "\\n" ends one), control
    characters are shown as '?', wide characters get two caret columns, and a
    long line is cut to a window around the column.
    """
    if not source or pos.line <= 0:
        return ""
    text_lines = source.split("\n")
    if pos.line > len(text_lines):
        return ""
    line = text_lines[pos.line - 1].removesuffix("\r")
    col = min(max(pos.col, 1), len(line) + 1)
    start, end = max(0, col - 1 - CONTEXT_WIDTH // 2), col - 1 + CONTEXT_WIDTH // 2
    shown = ("..." if start else "") + _printable(line[start:end]) + ("..." if end < len(line) else "")
    pad = (3 if start else 0) + _width(line[start : col - 1])
    gutter = f"{pos.line:>4} | "
    return f"{gutter}{shown}\n{' ' * (len(gutter) + pad)}^"


CONTEXT_WIDTH = 160


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else " " if c == "\t" else "?" for c in text)


def _width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)
