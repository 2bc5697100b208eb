"""stitch: a declarative rewrite-rule engine on e-graphs for tensor kernel fusion.

The names below are loaded when first read (PEP 562), so that importing a part of stitch (the CLI,
whose `check` and `fmt` need only the parser and checker) does not import the whole compiler and
numpy first."""

from .engine import __version__  # noqa: F401

__all__ = ["compile", "CompiledProgram", "set_num_threads", "num_threads", "__version__"]

_LAZY = {"compile": ("engine.api", "compile"), "CompiledProgram": ("engine.api", "CompiledProgram"),
         "set_num_threads": ("targets.runtime", "set_threads"), "num_threads": ("targets.runtime", "threads")}


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'stitch' has no attribute '{name}'")
    from importlib import import_module

    module, attr = _LAZY[name]
    value = getattr(import_module(f".{module}", __name__), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
