"""`stitch rules check`: rewrite rules tested for soundness on random instances.

    verdicts.py     the contract (what a variable stands for, the tolerance), the search, the report
    constraints.py  what a rule says about its instances; op variables expanded into ops
    draw.py         one instance drawn: types, attribute values, inputs
    compare.py      the two sides compared; a counterexample shown
"""

from .compare import TOLERANCE
from .draw import EDGE_VALUES, infer_type
from .verdicts import Verdict, check_rule, check_rule_file, report

__all__ = ["EDGE_VALUES", "TOLERANCE", "Verdict", "check_rule", "check_rule_file", "infer_type", "report"]
