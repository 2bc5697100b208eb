"""stitch: a declarative rewrite-rule engine on e-graphs for tensor kernel fusion."""

__version__ = "0.1.0"
