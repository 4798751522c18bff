"""Health and history: `scan` (NaN/Inf, zeros, range, moments and norms of every leaf, in one
pass) and `timeline` (how each leaf moved across a run's checkpoints).

`scan` reads a quantized checkpoint's members as stored (`inspector.quant_groups` tells which
leaves are codes, scales and zero points): its integer codes are scanned as integers. Scan
`inspector.dequantize(tree)` for the weights' own figures (see docs/health.md).
"""
