"""The user's files stitch reads and writes besides programs: inputs and outputs (.npz), text.

Every error names the file (DESIGN, "Errors"): an archive that is not an .npz, arrays that do not
match the program's parameters, a path that cannot be written.
"""

from __future__ import annotations

from .ir.errors import StitchError
from .ir.program import Pos

NPZ_HINT = "write inputs with np.savez(path, name=array, ...): one array per parameter, keyed by its name"


def load_inputs(path: str, graph, bound: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, checked against the graph's parameters (those not `bound` by
    --weights); every error names the file."""
    from .ir.interp import bind_inputs

    return _checked_npz(path, graph, lambda arrays: bind_inputs(graph, arrays, bound))


def load_weights(path: str, graph) -> dict[str, np.ndarray]:
    """The arrays of an .npz file of weights (--weights), each checked against the parameter it names."""
    from .ir.interp import bind_weights

    return _checked_npz(path, graph, lambda arrays: bind_weights(graph, arrays))


def _checked_npz(path: str, graph, check) -> dict[str, np.ndarray]:
    arrays = read_npz(path)
    try:
        check(arrays)
    except StitchError as err:
        held = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in arrays.items()) or "no arrays"
        raise StitchError(err.message, Pos(path, 0, 0),
                          hint=f"the file holds {held}; the program is {graph.signature()}") from None
    return arrays


def read_npz(path: str) -> dict[str, np.ndarray]:
    """Every array of an .npz file; a file that is not one (or holds pickled objects) is a clear error."""
    where = Pos(path, 0, 0)
    try:
        with open(path, "rb") as f:
            magic = f.read(6)
    except FileNotFoundError:
        raise StitchError("no such file", where) from None
    except OSError as err:
        raise StitchError(f"cannot read ({err.strerror})", where) from None
    if magic.startswith(b"\x93NUMPY"):
        raise StitchError("this is an .npy file (one array), not an .npz of named inputs", where, hint=NPZ_HINT)
    if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06")):  # a zip archive: a file or an empty directory first
        raise StitchError("not an .npz file (np.savez writes a zip archive of arrays)", where, hint=NPZ_HINT)
    try:
        import numpy as np

        data = np.load(path, allow_pickle=False)
    except Exception as err:  # a damaged archive: zipfile's and numpy's many errors
        raise StitchError(f"not a readable .npz file ({type(err).__name__}: {err})", where, hint=NPZ_HINT) from None
    arrays = {}
    with data:
        for name in data.files:
            try:
                arrays[name] = data[name]
            except ValueError as err:
                if "pickle" in str(err):
                    raise StitchError(f"array '{name}' holds Python objects (pickled data), which stitch does "
                                      "not load", where, hint=NPZ_HINT) from None
                raise StitchError(f"array '{name}' cannot be read ({err})", where, hint=NPZ_HINT) from None
            except Exception as err:
                raise StitchError(f"array '{name}' cannot be read ({type(err).__name__}: {err})", where,
                                  hint=NPZ_HINT) from None
            if not hasattr(arrays[name], "dtype"):  # numpy gives a member that is not .npy as bytes
                raise StitchError(f"'{name}' in the archive is not a numpy array", where, hint=NPZ_HINT)
    return arrays


def write_text(path: str, text: str) -> None:
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError as err:
        raise StitchError(f"{path}: cannot write ({err.strerror})") from None


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """Write `arrays` to exactly `path` (numpy would append .npz to a name without it)."""
    try:
        with open(path, "wb") as f:
            import numpy as np

            np.savez(f, **arrays)
    except OSError as err:
        raise StitchError(f"{path}: cannot write ({err.strerror})") from None
