"""Rewriting: the rule language, rules -> egglog, the e-graph and its saturation, and the rule
checker (`stitch rules check`). Imports only engine/ir."""
