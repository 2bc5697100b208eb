"""Target descriptions: the numbers the cost model, tiling and simulator read.

Built-in `cpu` and `accel` live beside this file as TOML; a user passes their
own with `--target FILE.toml`. Every mistake in a target file is an error
naming the file, line and key.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..engine.errors import StitchError
from ..engine.ir import Pos
from ..engine.parse import read_source

TARGET_DIR = Path(__file__).resolve().parent
BUILTIN = ("cpu", "accel")


@dataclass(frozen=True)
class MatrixUnit:
    tile_m: int
    tile_n: int
    tile_k: int
    cycles_per_tile: float


@dataclass(frozen=True)
class Target:
    name: str
    kind: str  # "cpu" | "accel"
    clock_ghz: float
    cores: int
    onchip_bytes: int
    global_bandwidth: float  # bytes per cycle
    launch_cycles: float
    vector_lanes: int
    alignment: int = 64
    fma_per_lane: float = 1.0
    overlap_dma: bool = False
    matrix: MatrixUnit | None = None
    op_cycles: dict[str, float] = field(default_factory=dict)

    def cycles_per_element(self, op: str) -> float:
        return self.op_cycles.get(op, 1.0)

    def seconds(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e9)


_FIELDS = {
    "name": str, "kind": str, "clock_ghz": float, "cores": int, "onchip_bytes": int,
    "global_bandwidth": float, "launch_cycles": float, "vector_lanes": int, "alignment": int,
    "fma_per_lane": float, "overlap_dma": bool, "matrix": dict, "op_cycles": dict,
}
_REQUIRED = ("name", "kind", "clock_ghz", "cores", "onchip_bytes", "global_bandwidth", "launch_cycles",
             "vector_lanes")
_MATRIX = ("tile_m", "tile_n", "tile_k", "cycles_per_tile")


def load_target(spec: str) -> Target:
    """A built-in target by name (`cpu`, `accel`) or a `.toml` file by path."""
    if spec in BUILTIN:
        path = TARGET_DIR / f"{spec}.toml"
    else:
        path = Path(spec)
        if not path.suffix == ".toml" and not path.exists():
            raise StitchError(f"unknown target '{spec}': use {' or '.join(BUILTIN)}, or a path to a .toml file")
    return parse_target(read_source(path), str(path))


def parse_target(text: str, filename: str = "<target>") -> Target:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(err))
        pos = Pos(filename, int(m.group(1)), int(m.group(2))) if m else Pos(filename, 1, 1)
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(err))
        raise StitchError(f"malformed target description: {message}", pos, text) from None

    def error(key: str, message: str) -> StitchError:
        return StitchError(message, _key_pos(text, filename, key), text)

    for key in data:
        if key not in _FIELDS:
            raise error(key, f"unknown key '{key}' in a target description (known: {', '.join(_FIELDS)})")
    for key in _REQUIRED:
        if key not in data:
            raise StitchError(f"target description lacks '{key}'", Pos(filename, 1, 1), text)
    for key, want in _FIELDS.items():
        if key in data and not _is(data[key], want):
            raise error(key, f"'{key}' must be {_kind_name(want)}, got {data[key]!r}")
    if data["kind"] not in ("cpu", "accel"):
        raise error("kind", f"'kind' must be \"cpu\" or \"accel\", got {data['kind']!r}")
    for key in ("clock_ghz", "cores", "onchip_bytes", "global_bandwidth", "vector_lanes", "fma_per_lane", "alignment"):
        if key in data and data[key] <= 0:
            raise error(key, f"'{key}' must be positive, got {data[key]}")
    if data["launch_cycles"] < 0:
        raise error("launch_cycles", "'launch_cycles' must not be negative")
    if "alignment" in data and data["alignment"] & (data["alignment"] - 1):
        raise error("alignment", f"'alignment' must be a power of two, got {data['alignment']}")
    matrix = None
    if "matrix" in data:
        m = data["matrix"]
        for key in m:
            if key not in _MATRIX:
                raise error(key, f"unknown key '{key}' in [matrix] (known: {', '.join(_MATRIX)})")
        for key in _MATRIX:
            if key not in m:
                raise error("matrix", f"[matrix] lacks '{key}'")
            if not _is(m[key], float) or m[key] <= 0:
                raise error(key, f"[matrix] '{key}' must be a positive number")
        matrix = MatrixUnit(int(m["tile_m"]), int(m["tile_n"]), int(m["tile_k"]), float(m["cycles_per_tile"]))
    if data["kind"] == "accel" and matrix is None:
        raise StitchError("an accel target needs a [matrix] table", Pos(filename, 1, 1), text)
    if data["kind"] == "accel" and data["cores"] != 1:
        raise error("cores", f"an accel target has one core (the simulator runs its tiles one after another), "
                             f"got {data['cores']}")
    op_cycles = {}
    from ..engine.ops import OPS

    for op, cycles in data.get("op_cycles", {}).items():
        if op not in OPS:
            raise error(op, f"[op_cycles] names an unknown op '{op}'")
        if not _is(cycles, float) or cycles <= 0:
            raise error(op, f"[op_cycles] '{op}' must be a positive number")
        op_cycles[op] = float(cycles)
    fields = {k: data[k] for k in _FIELDS if k in data and k not in ("matrix", "op_cycles")}
    for key, want in _FIELDS.items():
        if key in fields and want is float:
            fields[key] = float(fields[key])
    return Target(**fields, matrix=matrix, op_cycles=op_cycles)


def _is(value, want) -> bool:
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, want)


def _kind_name(want) -> str:
    return {str: "a string", float: "a number", int: "an integer", bool: "true or false", dict: "a table"}[want]


def _key_pos(text: str, filename: str, key: str) -> Pos:
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(rf"\s*{re.escape(key)}\s*=", line)
        if m:
            return Pos(filename, i, line.index(key) + 1)
        if re.match(rf"\s*\[{re.escape(key)}\]", line):
            return Pos(filename, i, line.index(key) + 1)
    return Pos(filename, 1, 1)
