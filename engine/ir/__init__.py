"""The program IR: dataclasses, parser and printer, shape checker, op table, numpy reference
interpreter, and the errors every stage raises. The bottom layer: it imports no other part of stitch."""
