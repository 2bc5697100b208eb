"""stitch: a declarative rewrite-rule engine on e-graphs for tensor kernel fusion."""

from .engine import __version__  # noqa: E402,F401
from .engine.api import CompiledProgram, compile  # noqa: E402,F401
from .targets.runtime import set_threads as set_num_threads  # noqa: E402,F401
from .targets.runtime import threads as num_threads  # noqa: E402,F401

__all__ = ["compile", "CompiledProgram", "set_num_threads", "num_threads", "__version__"]
