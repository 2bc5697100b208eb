"""Target descriptions: the numbers the cost model, tiling and simulator read.

Built-in `cpu` and `accel` live beside this file as TOML; a user passes their
own with `--target FILE.toml`. Every mistake in a target file is an error
naming the file, line and key.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ..ir.errors import StitchError
from ..ir.parse import read_source
from ..ir.program import Pos

TARGET_DIR = Path(__file__).resolve().parents[2] / "targets"  # the built-in descriptions are data in targets/
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
    # cycles to combine per-tile partials after a kernel's last tile (global stitching); half a
    # launch unless the description says
    sync: float | None = None
    # Capacity policies of tiling (cost.py): an input that does not vary along every tiled axis is
    # held whole on chip when it takes at most this share of `onchip_bytes` (the rest is left to
    # the tile), and a tile stops growing before fewer than this many tiles per core remain (so
    # every core has tiles to take when another's run long).
    resident_share: float = 0.125
    tiles_per_core: int = 2
    # Where on-chip memory is a cache: a staged read whose rows are at least this many bytes is
    # read in place, with no copy (plan.read_in_place); shorter rows far apart are still gathered
    # into one contiguous buffer. 0 (a scratchpad): every copy stays.
    inplace_run_bytes: int = 0
    # A kernel of fewer element updates runs its tiles on the calling thread, one core (plan.py,
    # `threaded`): waking the other threads costs more than that work. 0: every kernel's tiles
    # are spread over the cores.
    parallel_work: int = 0
    # Where on-chip memory is a cache: a kernel's tiles run as a two-stage pipeline, each tile's
    # last row loop beside the next tile's first (its writes beside the next one's reads), when
    # two copies of a tile's buffers fit `onchip_bytes` (lowering/overlap.py)
    pipeline_tiles: bool = False
    # Where on-chip memory is a cache: a tile's nests over the same rows run as one loop over its rows,
    # a row's values staying in the first-level cache (lowering/fuse.py).
    fuse_rows: bool = False
    # Where on-chip memory is a cache: a bound weight read whole in its own layout is read where it is,
    # not copied into a block of its own by the prologue (lowering/bind.py).
    weights_in_place: bool = False
    # What runs the lowered program: "c" (C built for this machine; the numpy executor where no C
    # compiler exists) or "simulator" (the accelerator's). Unless the description says, "c" on a cpu
    # target and "simulator" on an accel one.
    executor: str = "c"

    @property
    def sync_cycles(self) -> float:
        return self.launch_cycles / 2 if self.sync is None else self.sync

    @property
    def resident_bytes(self) -> int:
        """The largest input held whole on chip."""
        return int(self.onchip_bytes * self.resident_share)

    @property
    def min_tiles(self) -> int:
        """The fewest tiles a kernel's tile may grow to."""
        return self.tiles_per_core * self.cores

    def cycles_per_element(self, op: str) -> float:
        return self.op_cycles.get(op, 1.0)

    def seconds(self, cycles: float) -> float:
        return cycles / (self.clock_ghz * 1e9)


_FIELDS = {
    "name": str, "kind": str, "clock_ghz": float, "cores": int, "onchip_bytes": int,
    "global_bandwidth": float, "launch_cycles": float, "vector_lanes": int, "alignment": int,
    "fma_per_lane": float, "overlap_dma": bool, "sync": float, "resident_share": float, "tiles_per_core": int,
    "inplace_run_bytes": int, "parallel_work": int, "pipeline_tiles": bool, "fuse_rows": bool,
    "weights_in_place": bool, "executor": str,
    "matrix": dict, "op_cycles": dict, "op_cycles_at": dict, "onchip_cache": str, "onchip_share": float,
}
CACHE_LEVELS = {"l1": 1, "l2": 2, "l3": 3}
EXECUTORS = ("c", "simulator")
SYSFS_CPU = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")
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
    data.setdefault("executor", "simulator" if data["kind"] == "accel" else "c")
    if data["executor"] not in EXECUTORS:
        raise error("executor", f"'executor' must be one of {', '.join(map(repr, EXECUTORS))}, "
                                f"got {data['executor']!r}")
    if data["executor"] == "simulator" and data["kind"] != "accel":
        raise error("executor", "the simulator runs accel targets only")
    for key, rule in _NUMBERS.items():
        if key in data and (problem := _number_problem(data[key], rule)):
            raise error(key, f"'{key}' must be {problem}, got {data[key]!r}")
    share = data.pop("onchip_share", 1.0)
    if "onchip_cache" in data:
        level = data.pop("onchip_cache")
        if level not in CACHE_LEVELS:
            raise error("onchip_cache", f"'onchip_cache' must be one of {', '.join(map(repr, CACHE_LEVELS))}, "
                                        f"got {level!r}")
        reported = machine_cache_bytes(CACHE_LEVELS[level])
        data["onchip_bytes"] = max(int(reported * share), 1) if reported else data["onchip_bytes"]
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
            if problem := _number_problem(m[key], "count" if key.startswith("tile_") else "positive"):
                raise error(key, f"[matrix] '{key}' must be {problem}, got {m[key]!r}")
        matrix = MatrixUnit(int(m["tile_m"]), int(m["tile_n"]), int(m["tile_k"]), float(m["cycles_per_tile"]))
    if data["kind"] == "accel" and matrix is None:
        raise StitchError("an accel target needs a [matrix] table", Pos(filename, 1, 1), text)
    if data["kind"] == "accel" and data["cores"] != 1:
        raise error("cores", f"an accel target has one core (the simulator runs its tiles one after another), "
                             f"got {data['cores']}")
    # [op_cycles], and where the machine's vectors are `width` bytes, [op_cycles_at.width]'s entries
    # over it (the same op on AVX2 and on AVX-512 is a different count of instructions)
    tables = {"op_cycles": data.get("op_cycles", {})}
    for width, table in data.get("op_cycles_at", {}).items():
        if not (width.isdigit() and int(width) > 0 and isinstance(table, dict)):
            raise error(width, f"[op_cycles_at] holds tables named by a vector width in bytes, got {width!r}")
        tables[f"op_cycles_at.{width}"] = table
    from ..ir.ops import OPS

    for name, table in tables.items():
        for op, cycles in table.items():
            if op not in OPS:
                raise error(op, f"[{name}] names an unknown op '{op}'")
            if problem := _number_problem(cycles, "positive"):
                raise error(op, f"[{name}] '{op}' must be {problem}, got {cycles!r}")
    width = machine_vector_bytes()
    op_cycles = {op: float(c) for op, c in {**tables["op_cycles"], **tables.get(f"op_cycles_at.{width}", {})}.items()}
    fields = {k: data[k] for k in _FIELDS if k in data and k not in ("matrix", "op_cycles", "op_cycles_at")}
    for key, want in _FIELDS.items():
        if key in fields and want is float:
            fields[key] = float(fields[key])
    return Target(**fields, matrix=matrix, op_cycles=op_cycles)


@functools.cache
def machine_cache_bytes(level: int, root: Path = SYSFS_CPU) -> int | None:
    """The data (or unified) cache of this level one core has, from Linux sysfs: its size over
    the CPUs sharing it. None where the machine does not say (not Linux, no such level)."""
    try:
        for index in sorted((root / "cpu0" / "cache").glob("index*")):
            if int((index / "level").read_text()) != level or (index / "type").read_text().strip() == "Instruction":
                continue
            size = (index / "size").read_text().strip()
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(size[-1:], 1)
            nbytes = int(size.rstrip("KMG")) * scale
            sharing = 0
            for part in (index / "shared_cpu_list").read_text().strip().split(","):
                lo, _, hi = part.partition("-")
                sharing += int(hi or lo) - int(lo) + 1
            return nbytes // max(sharing, 1) or None
    except (OSError, ValueError):
        return None
    return None


@functools.cache
def machine_vector_bytes(cpuinfo: Path = CPUINFO) -> int | None:
    """The width of the vectors C compiled for this machine (gcc -march=native) uses, from the CPU's
    flags in Linux's /proc/cpuinfo, as targets/cc.py's vector_bytes reads the compiler's: 64 with
    AVX-512, 32 with AVX, 16 otherwise; None where the machine does not say (not Linux)."""
    flags = _cpuinfo_field(("flags", "Features"), cpuinfo)
    if flags is None:
        return None
    flags = set(flags.split())
    return 64 if "avx512f" in flags else 32 if "avx" in flags else 16


@functools.cache
def machine_vendor(cpuinfo: Path = CPUINFO) -> str | None:
    """The CPU's vendor as Linux's /proc/cpuinfo names it (`AuthenticAMD`, `GenuineIntel`, ...); None
    where the machine does not say."""
    vendor = _cpuinfo_field(("vendor_id",), cpuinfo)
    return vendor.strip() if vendor is not None else None


def _cpuinfo_field(keys: tuple[str, ...], cpuinfo: Path) -> str | None:
    """What follows the colon of /proc/cpuinfo's first line starting with one of `keys`; None where
    there is none or the file cannot be read."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith(keys):
                return line.partition(":")[2]
    except OSError:
        return None
    return None


# What each number of a target description may be: a "count" is a positive integer (at most
# MAX_COUNT: the cost model multiplies them), "positive" a number from POSITIVE_MIN to POSITIVE_MAX
# (the cost model and the simulator divide by them: a bandwidth of 5e-324 bytes per cycle made a
# 32-byte transfer take infinitely many cycles), "nonnegative" a finite number of at least 0, a
# "share" a number above 0 and at most 1. TOML allows nan and inf; no target number means
# anything with them.
_NUMBERS = {
    "clock_ghz": "positive", "cores": "count", "onchip_bytes": "count", "global_bandwidth": "positive",
    "launch_cycles": "nonnegative", "vector_lanes": "count", "alignment": "count", "fma_per_lane": "positive",
    "sync": "nonnegative", "resident_share": "share", "tiles_per_core": "count", "inplace_run_bytes": "nonnegative",
    "parallel_work": "nonnegative", "onchip_share": "share",
}
MAX_COUNT = 2**40
POSITIVE_MIN, POSITIVE_MAX = 1e-9, 1e12


def _number_problem(value, rule: str) -> str:
    """'' when `value` follows `rule`, else what it must be."""
    if rule == "count":
        if not _is(value, int) or not 0 < value <= MAX_COUNT:
            return f"a positive integer (at most 2**{MAX_COUNT.bit_length() - 1})"
        return ""
    if rule == "share":
        if not _is(value, float) or not 0 < value <= 1:
            return "a number above 0 and at most 1 (a share)"
        return ""
    if rule == "positive":
        if not _is(value, float) or not POSITIVE_MIN <= value <= POSITIVE_MAX:
            return f"a number from {POSITIVE_MIN:g} to {POSITIVE_MAX:g}"
        return ""
    if not _is(value, float) or not math.isfinite(value) or value < 0:
        return "a finite number of at least 0"
    return ""


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
