"""Health and history: `scan` (NaN/Inf, zeros, range, moments and norms of every leaf, in one
pass) and `timeline` (how each leaf moved across a run's checkpoints).

`scan` reads each quantized weight (`inspector.quant_groups`) as its dequantized values, one
leaf at its logical key path (`quantized.py`; see docs/health.md).
"""
