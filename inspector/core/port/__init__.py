"""Porting weights between frameworks: align two trees' key paths and layouts, then convert.

`align(source, target)` pairs every target leaf with the source leaf it comes from and the
layout transform that fits it (`align.py`); `Alignment` holds the result, its overrides and
exports (`alignment.py`, `code.py`); `convert` runs the transforms as jitted kernels
(`convert.py`).
"""
