"""A user's rule file is checked when it is loaded: an unsound rule is refused with its
counterexample, not applied silently (a wrong result from `compile` or `run` without a word).

The check is `stitch rules check`'s (verdicts.py) with LOAD_EXAMPLES instances per rule on
ordinary values and as many at edge values; a rule that holds only away from edge values is
refused too unless it carries the `[unsafe-fp]` tag (and is then used only with --unsafe-fp).
Verdicts are cached by the rules' text under the compile cache (`rules/`): the second load of an
unchanged file checks nothing. `trust_rules` (`--trust-rules`) skips the check, at the user's word.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path

from ...ir.errors import StitchError
from ..rule_printer import print_rule
from ..rules import RuleFile
from .verdicts import check_rule_file

# Instances per rule at load: fewer than `rules check`'s 100, so a compile stays quick; a rule wrong
# for a whole class of shapes or values fails on the first few.
LOAD_EXAMPLES = 30


def refuse_unsound(rf: RuleFile, cache_dir: Path | None) -> None:
    """Raise StitchError for the first rule of `rf` that is unsound (or holds only away from edge
    values without the [unsafe-fp] tag), with its counterexample; cache the file's verdicts."""
    key = _key(rf)
    path = cache_dir / "rules" / f"{key}.json" if cache_dir is not None else None
    verdicts = _read(path)
    if verdicts is None:
        verdicts = [(v.rule.name, v.status, v.render()) for v in check_rule_file(rf, LOAD_EXAMPLES)]
        _write(path, verdicts)
    for _name, status, text in verdicts:
        if status in ("unsound", "edge"):
            raise StitchError(f"{rf.filename}: a rule `stitch rules check` refuses is not used:\n{text}",
                              hint="fix the rule (or tag a rule that holds only away from NaN, inf and -0.0 "
                                   "[unsafe-fp]); --trust-rules (trust_rules=True) uses it anyway, at your word")


def _key(rf: RuleFile) -> str:
    """The rules' text, the instance count, and the checker's and the reference's own source: a
    verdict is reused only for the same rules judged by the same code."""
    digest = hashlib.sha256(f"{LOAD_EXAMPLES}\n".encode())
    for rule in rf.rules:
        digest.update(f"{print_rule(rule)} {rule.tags}\n".encode())
    digest.update(_checker_digest())
    return digest.hexdigest()[:24]


@functools.cache
def _checker_digest() -> bytes:
    """The checker's and the reference interpreter's source, hashed once per process."""
    here = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for source in sorted(here.glob("*.py")) + [here.parent.parent / "ir" / "interp.py"]:
        digest.update(source.read_bytes())
    return digest.digest()


def _read(path: Path | None):
    if path is None or not path.is_file():
        return None
    try:
        return [tuple(v) for v in json.loads(path.read_text())]
    except (OSError, ValueError):
        return None  # unreadable: check again


def _write(path: Path | None, verdicts) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(verdicts))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next load a check
