"""User-facing errors: one paragraph naming file:line:col, the line and a caret."""

from __future__ import annotations

from .ir import NOPOS, Pos


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
        head = f"{self.pos}: error: {self.message}" if self.pos.line else f"error: {self.message}"
        lines = [head]
        snippet = caret_context(self.source, self.pos)
        if snippet:
            lines.append(snippet)
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.render()


def caret_context(source: str, pos: Pos) -> str:
    """The source line at `pos` and a caret under its column."""
    if not source or pos.line <= 0:
        return ""
    text_lines = source.splitlines()
    if pos.line > len(text_lines):
        return ""
    line = text_lines[pos.line - 1].expandtabs(1)
    gutter = f"{pos.line:>4} | "
    return f"{gutter}{line}\n{' ' * len(gutter)}{' ' * max(pos.col - 1, 0)}^"
