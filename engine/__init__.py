"""The front and middle of stitch: IR, checker, interpreter, rules, e-graph, cost, extraction, CLI.

(Deep programs need deep recursion: `recursion.py` makes room for it while stitch runs, without
changing the interpreter's limit for the rest of the process.)"""
