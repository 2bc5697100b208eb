"""Fuzz the front end: whatever a `.ir` file holds, `stitch check` answers 0 or 1.

Two sources of inputs: sentences of the grammar (`from_lark` on `grammar/ir.lark`
as it is, and on a copy that gives dtype, op and attribute names terminals of
their own so that sentences get past the parser into the checker), and the
example programs broken by random edits at the character, token and byte level. Every input goes
through the real CLI entry point, in process. A crash is exit 3 (an internal
error) or an exception escaping `main`; an error must name file:line:col and
point at its line with a caret. Files that check are also formatted, and the
formatted text must check too.

The number of examples comes from the settings profile (`quick`, or `long` with `pytest --long`).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.lark import from_lark
from lark import Lark
from stitch.engine.cli import main
from stitch.engine.ir.ops import OPS
from stitch.engine.ir.parse import GRAMMAR_DIR
from stitch.engine.ir.program import DTYPES

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.ir"))
EXAMPLE_BYTES = [p.read_bytes() for p in EXAMPLES]

ERROR_HEAD = re.compile(r"^(?P<file>.+):(?P<line>\d+):(?P<col>\d+): error: ", re.MULTILINE)


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`stitch ARGV...` in process: (exit code, stdout, stderr). Exceptions propagate."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def assert_well_handled(path: Path) -> None:
    """`check` exits 0 or 1; errors are located and shown; what checks, formats."""
    code, out, err = run_cli("check", str(path))
    assert code in (0, 1), f"exit {code}: {err}"
    assert "Traceback" not in err
    if code == 1:
        head = ERROR_HEAD.match(err)
        assert head and head["file"] == str(path), err
        lines = path.read_bytes().removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace").split("\n")
        if int(head["line"]) <= len(lines) and lines != [""]:
            assert re.search(r"^ +\^$", err, re.MULTILINE), err
        return
    assert out.startswith("func "), out
    code, formatted, err = run_cli("fmt", str(path))
    assert code == 0, err
    path.write_text(formatted)
    code, again, err = run_cli("check", str(path))
    assert code == 0 and again == out, err


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One file that every example overwrites (hypothesis forbids function-scoped fixtures)."""
    return tmp_path_factory.mktemp("fuzz") / "input.ir"


# -- sentences of the grammar ----------------------------------------------------------

# Spaces, newlines and comments between tokens, which the grammar ignores; they
# keep words apart and put errors on lines and columns other than the first.
_GAP = st.sampled_from([" ", " ", " ", "\n  ", "\t", " # note\n", "\r\n"])


def _mostly(good: list[str], bad: list[str]) -> st.SearchStrategy[str]:
    """One of `good`, or now and then one of `bad`."""
    return st.sampled_from(good * (60 // len(good) + 1) + bad)


def _padded(words: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(_GAP, words, _GAP).map("".join)


_ATTR_NAMES = ["axes", "keepdims", "perm", "shape", "dtype"]
_VALUE_NAMES = ["x", "y", "a", "b"]
_WORDS = sorted(OPS) + list(DTYPES) + _ATTR_NAMES + _VALUE_NAMES
_IDENTIFIERS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_INTS = _mostly([str(i) for i in range(-3, 4)], ["+2", "2147483648", "9" * 400])
_NUMBERS = _INTS | _mostly(["1.0", "0.5", "-2.5", "1e-5", "3E+2", ".5", "5."], ["1e999", "-1e400"])

_KEYWORDS = {
    # Left to itself, from_lark would draw comments that swallow the rest of a line.
    "COMMENT": st.sampled_from(["# note\n", "#\n"]),
    "WS": _GAP,
    "RETURN": _padded(st.just("return")),
    "TRUE": _padded(st.just("true")),
    "FALSE": _padded(st.just("false")),
    "FUNC": _padded(st.just("func")),
    "SIGNED_INT": _padded(_INTS),
    "SIGNED_NUMBER": _padded(_NUMBERS),
}

# Dimension expressions nest without bound (`(n + (m * (2 - ...)))`): drawn from the grammar as
# it is, sentences grow until hypothesis gives up on them. The fuzzed grammar keeps one operator
# and one level of parentheses; test_dims covers deeper expressions.
_FLAT_DIMS = """?dim: dim_unary
    | dim_unary "+" dim_unary -> dim_add
    | dim_unary "-" dim_unary -> dim_sub
    | dim_unary "*" dim_unary -> dim_mul
    | dim_unary "//" dim_unary -> dim_floordiv
    | dim_unary "%" dim_unary -> dim_mod
?dim_unary: SIGNED_INT -> dim_int
          | NAME -> dim_symbol
          | "(" dim_unary "+" SIGNED_INT ")"
"""


def _fuzzed_grammar_text() -> str:
    """ir.lark with its dimension rules flattened (`_FLAT_DIMS`)."""
    text = (GRAMMAR_DIR / "ir.lark").read_text()
    start, end = text.index("?dim: dim_product"), text.index('          | "(" dim ")"\n')
    return text[:start] + _FLAT_DIMS + text[end + len('          | "(" dim ")"\n'):]


# The grammar as it is: a NAME is any word, so most sentences stop in the parser
# (bad dtype names) or at the checker's first name lookup.
sentences = from_lark(
    Lark(_fuzzed_grammar_text(), parser="lalr"),
    start="start",
    explicit=_KEYWORDS | {"NAME": _padded(st.sampled_from(_WORDS) | _IDENTIFIERS)},
)


def _typed_grammar() -> Lark:
    """ir.lark with one terminal per role of NAME, so sentences reach the checker.

    Dtype names, op names, attribute names, dimensions and symbols each get a
    terminal of their own (declared, drawn from `explicit`); NAME is left to values.
    """
    text = _fuzzed_grammar_text()
    roles = [
        ('type: NAME "["', 'type: DTYPE "["'),
        ("?dim_unary: SIGNED_INT -> dim_int", "?dim_unary: DIM -> dim_int"),
        ("| NAME -> dim_symbol", "| SYMBOL -> dim_symbol"),
        ('symbol: NAME ":"', 'symbol: SYMBOL ":"'),
        ('| NAME "(" [arg', '| OP "(" [arg'),
        ('| NAME "=" attr_value', '| ATTR "=" attr_value'),
        ("| NAME                          -> attr_name", "| DTYPE                          -> attr_name"),
    ]
    for old, new in roles:
        assert text.count(old) == 1, f"ir.lark changed; update the fuzzer's role split for {old!r}"
        text = text.replace(old, new)
    return Lark(text + "\n%declare DTYPE DIM OP ATTR SYMBOL\n", parser="lalr")


typed_sentences = from_lark(
    _typed_grammar(),
    start="start",
    explicit=_KEYWORDS
    | {
        "NAME": _padded(_mostly(_VALUE_NAMES, ["func", "true", "z", "x_1"])),
        "DTYPE": _padded(_mostly(["f32", "f32", "i32", "bool", "f16", "f64", "i64"], ["f8"])),
        "DIM": _padded(_mostly(["1", "2", "3"], ["0", "-1", "2147483648"])),
        "SYMBOL": _padded(_mostly(["n", "p"], ["x", "func"])),
        "OP": _padded(_mostly(sorted(OPS), ["nop"])),
        "ATTR": _padded(_mostly(_ATTR_NAMES, ["axis"])),
    },
)


@given(sentences)
def test_grammar_sentences_check_or_fail_cleanly(scratch, text):
    scratch.write_text(text)
    assert_well_handled(scratch)


@given(typed_sentences)
def test_typed_grammar_sentences_check_or_fail_cleanly(scratch, text):
    scratch.write_text(text)
    assert_well_handled(scratch)


# -- broken example programs ---------------------------------------------------------

TOKEN = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*|[-+]?[0-9.]+(?:[eE][-+]?[0-9]+)?|->|\s+|#[^\n]*|.", re.DOTALL)
# Pieces worth inserting: the language's own punctuation and words, and a few
# things that are not in it at all.
_PIECES = [
    b"(", b")", b",", b"=", b"->", b"[", b"]", b"{", b"}", b":", b"-", b"#", b"\n", b"\t", b" ",
    b"func", b"return", b"true", b"false", b"x", b"f32", b"i32", b"bool", b"f99", b"add", b"sum",
    b"axes=[0]", b"keepdims=true", b"perm=[1, 0]", b"shape=[-1]", b"dtype=i32", b"0", b"-1", b"2.5",
    b"1e999", b"9" * 5000, b"neg(" * 300, b")" * 300, b"\x00", b"\xff\xfe", b"\xc3", "\u00e9\u4e2d".encode(),
    b"\xef\xbb\xbf", b"\r", b"\x0c", b";", b"@", b"'", b'"',
]


@st.composite
def broken_examples(draw) -> bytes:
    data = draw(st.sampled_from(EXAMPLE_BYTES))
    for _ in range(draw(st.integers(1, 4))):
        data = draw(st.sampled_from(_MUTATIONS))(draw, data)
    return data


def _span(draw, n: int, most: int = 8) -> tuple[int, int]:
    start = draw(st.integers(0, max(n - 1, 0)))
    return start, min(n, start + draw(st.integers(1, most)))


def delete_chars(draw, data: bytes) -> bytes:
    i, j = _span(draw, len(data))
    return data[:i] + data[j:]


def duplicate_chars(draw, data: bytes) -> bytes:
    i, j = _span(draw, len(data), 40)
    return data[:j] + data[i:j] + data[j:]


def swap_chars(draw, data: bytes) -> bytes:
    if len(data) < 2:
        return data
    i = draw(st.integers(0, len(data) - 2))
    return data[:i] + data[i + 1 : i + 2] + data[i : i + 1] + data[i + 2 :]


def truncate(draw, data: bytes) -> bytes:
    return data[: draw(st.integers(0, len(data)))]


def insert_garbage(draw, data: bytes) -> bytes:
    i = draw(st.integers(0, len(data)))
    return data[:i] + draw(st.binary(min_size=1, max_size=8)) + data[i:]


def insert_piece(draw, data: bytes) -> bytes:
    i = draw(st.integers(0, len(data)))
    return data[:i] + draw(st.sampled_from(_PIECES)) + data[i:]


def _tokens(data: bytes) -> list[bytes]:
    return TOKEN.findall(data)


def delete_token(draw, data: bytes) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    del toks[draw(st.integers(0, len(toks) - 1))]
    return b"".join(toks)


def duplicate_token(draw, data: bytes) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    k = draw(st.integers(0, len(toks) - 1))
    toks.insert(k, toks[k])
    return b"".join(toks)


def swap_tokens(draw, data: bytes) -> bytes:
    toks = _tokens(data)
    if len(toks) < 2:
        return data
    i, j = draw(st.integers(0, len(toks) - 1)), draw(st.integers(0, len(toks) - 1))
    toks[i], toks[j] = toks[j], toks[i]
    return b"".join(toks)


def replace_token(draw, data: bytes) -> bytes:
    toks = _tokens(data)
    if not toks:
        return data
    toks[draw(st.integers(0, len(toks) - 1))] = draw(st.sampled_from(_PIECES))
    return b"".join(toks)


_MUTATIONS = [
    delete_chars, duplicate_chars, swap_chars, truncate, insert_garbage, insert_piece,
    delete_token, duplicate_token, swap_tokens, replace_token,
]


@given(broken_examples())
def test_broken_examples_check_or_fail_cleanly(scratch, data):
    scratch.write_bytes(data)
    assert_well_handled(scratch)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_check_and_format(scratch, path):
    scratch.write_bytes(path.read_bytes())
    assert_well_handled(scratch)
    assert run_cli("check", str(path))[0] == 0
