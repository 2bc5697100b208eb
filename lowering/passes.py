"""The passes after loop-nest formation (lowering/lower.py), in order: each takes the LoopProgram and
the target and returns the program it made. Each imports its module when it runs (lowering imports
none of them at start-up). Tests run the verifier between them (tests/test_lowering.py)."""

from __future__ import annotations

from ..engine.schedule.target import Target
from .loops import LoopProgram


def _widen(program: LoopProgram, target: Target) -> LoopProgram:
    from .widen import widen_f16_accumulators

    return widen_f16_accumulators(program)


def _forward(program: LoopProgram, target: Target) -> LoopProgram:
    from .forward import forward_buffers

    return forward_buffers(program)


def _hoist(program: LoopProgram, target: Target) -> LoopProgram:
    from .bind import hoist_bound

    return hoist_bound(program, in_place=target.weights_in_place)


def _in_place(program: LoopProgram, target: Target) -> LoopProgram:
    from .inplace import read_in_place

    return read_in_place(program)


def _fuse(program: LoopProgram, target: Target) -> LoopProgram:
    from .fuse import fuse_rows

    return fuse_rows(program) if target.fuse_rows else program


def _reuse(program: LoopProgram, target: Target) -> LoopProgram:
    from .reuse import update_in_place

    return update_in_place(program)


def _merge(program: LoopProgram, target: Target) -> LoopProgram:
    from .alloc import merge_allocations

    return merge_allocations(program, alignment=target.alignment)


def _pipeline(program: LoopProgram, target: Target) -> LoopProgram:
    from .overlap import pipeline_tiles

    return pipeline_tiles(program, target.onchip_bytes)


def _delinearize(program: LoopProgram, target: Target) -> LoopProgram:
    from .delinearize import split_merged_loops

    return split_merged_loops(program)


def _collapse(program: LoopProgram, target: Target) -> LoopProgram:
    from .collapse import merge_reduce_loops

    return merge_reduce_loops(program)


def _panels(program: LoopProgram, target: Target) -> LoopProgram:
    from .panels import lay_out_panels

    return lay_out_panels(program) if target.weights_in_place else program


# Vendors whose cores multiply subnormal operands at full speed: the laid-out form reads 4-bit weights as
# subnormal floats (targets/c/nibble_dot.py). Intel's cores take a microcode assist of about a hundred
# cycles for each such operand unless denormals-are-zero is set, which that form must clear.
SUBNORMALS_AT_SPEED = ("AuthenticAMD", "HygonGenuine")


def _nibbles(program: LoopProgram, target: Target) -> LoopProgram:
    from ..engine.schedule.target import machine_vector_bytes, machine_vendor
    from .nibbles import lay_out_nibbles

    # (the layout AVX2's 8-lane form reads; AVX-512's reads the weight as given)
    if target.weights_in_place and machine_vector_bytes() == 32 and machine_vendor() in SUBNORMALS_AT_SPEED:
        return lay_out_nibbles(program)
    return program


def _pairs(program: LoopProgram, target: Target) -> LoopProgram:
    from ..engine.schedule.machine import pair_columns
    from .pairs import lay_out_pairs

    # (a machine with vectors narrower than AVX2's keeps the micro-kernel's pack; the cost model prices
    # the same choice, facts.py `paired`)
    columns = pair_columns(target)
    return lay_out_pairs(program, columns) if columns else program


def _remainders(program: LoopProgram, target: Target) -> LoopProgram:
    from .remainder import remainder_tiles

    return remainder_tiles(program)


PASSES = [_widen, _forward, _hoist, _in_place, _fuse, _reuse, _merge, _pipeline, _delinearize, _panels, _nibbles, _pairs,
          _remainders, _collapse]
