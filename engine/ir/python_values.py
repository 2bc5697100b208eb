"""Python scalars and nested lists given for a parameter, converted to its dtype as literals are.

A call (or `weights=`) takes numpy arrays of the parameter's dtype, and also a plain Python value: a
bool, int or float, or a list (or tuple) of them nested to the parameter's rank. Such a value
converts to the parameter's dtype by the rules the checker applies to a literal of the program
(`check._Checker.const`): a bool only for a bool parameter and only a bool there; an int or an
integral float for an integer parameter, when it fits; an int or a float for a float parameter,
rounded to the dtype's nearest value, unless it lies beyond the dtype's range. Anything else is an
error naming the input and the parameter's type. A numpy array or numpy scalar is never converted:
its dtype must be the parameter's.
"""

from __future__ import annotations

import numbers

import numpy as np

from .errors import StitchError
from .program import FLOAT_DTYPES, TensorType

PYTHON_TYPES = (bool, int, float, list, tuple)


def is_python_value(value) -> bool:
    """A value the caller wrote in Python (not a numpy array or numpy scalar)."""
    return type(value) in PYTHON_TYPES


def from_python(kind: str, name: str, value, want: TensorType, dtype: np.dtype) -> np.ndarray:
    """`value` (is_python_value) as an array of `want`'s dtype (numpy's `dtype`), or a StitchError
    saying why it is not one. Its shape is left to the caller to check against `want`'s."""
    expected = _expected(want, dtype)
    leaves = _leaves(value)
    bad = next((x for x in leaves if not isinstance(x, (bool, np.bool_, numbers.Real))), None)
    if bad is not None:
        raise StitchError(f"{kind} '{name}' holds a {type(bad).__name__} ({_shown(bad)}), but the parameter is "
                          f"{want}", hint=expected)
    for x in leaves:
        problem = _problem(x, want.dtype, dtype)
        if problem:
            raise StitchError(f"{kind} '{name}' holds {_shown(x)}, {problem}; the parameter is {want}", hint=expected)
    try:
        with np.errstate(all="ignore"):
            return np.array(value, dtype=dtype)
    except ValueError:  # a ragged nesting
        raise StitchError(f"{kind} '{name}' is a nested {type(value).__name__} whose rows differ in length; the "
                          f"parameter is {want}", hint=expected) from None


def not_an_array(kind: str, name: str, value, want: TensorType, dtype: np.dtype) -> StitchError:
    """The error for a value numpy holds only as objects, strings or bytes (None, a str, a dict)."""
    return StitchError(f"{kind} '{name}' is a {type(value).__name__} ({_shown(value)}), not an array or a number; "
                       f"the parameter is {want}", hint=_expected(want, dtype))


def _shown(x) -> str:
    text = repr(x)
    return text if len(text) <= 40 else text[:37] + "..."


def _leaves(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _problem(x, dtype: str, np_type: np.dtype) -> str:
    """Why `x` does not convert to `dtype` as a literal would, or ''."""
    is_bool = isinstance(x, (bool, np.bool_))
    if dtype == "bool":
        return "" if is_bool else "not a bool"
    if is_bool:
        return f"a bool, not a number of {dtype}"
    if dtype in FLOAT_DTYPES:
        try:
            v = float(x)
        except OverflowError:
            v = None
        with np.errstate(all="ignore"):
            overflows = v is None or (np.isfinite(v) and np.isinf(np_type.type(v)))
        return f"beyond the range of {dtype}" if overflows else ""
    if isinstance(x, numbers.Integral):
        v = int(x)
    elif float(x).is_integer():
        v = int(x)
    else:
        return f"not an integer, which {dtype} needs"
    info = np.iinfo(np_type)
    return "" if info.min <= v <= info.max else f"which does not fit in {dtype}"


def _expected(want: TensorType, dtype: np.dtype) -> str:
    """What the parameter takes, for a hint."""
    word = "bool" if want.dtype == "bool" else "float" if want.dtype in FLOAT_DTYPES else "int"
    plain = f"{'an' if word == 'int' else 'a'} {word}" if not want.shape else \
        f"a nested list of {word}s of shape {list(want.shape)}"
    return f"pass {plain}, or a numpy array of dtype {dtype}"
