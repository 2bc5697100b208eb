"""Front ends: programs written in other formats, turned into stitch IR (`onnx_import.py`)."""
