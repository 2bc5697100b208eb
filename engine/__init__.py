"""The front and middle of stitch, in stage packages imported one way (`ir` <- `rewrite` <-
`schedule`), and the driver on top of lowering/ and targets/: the pipeline, the API and the CLI.

(Deep programs need deep recursion: `ir/recursion.py` makes room for it while stitch runs, without
changing the interpreter's limit for the rest of the process.)"""

__version__ = "0.1.0"  # the one place it is written: pyproject reads it, `stitch` re-exports it
