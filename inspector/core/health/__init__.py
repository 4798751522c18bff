"""Health and history: `scan` (NaN/Inf, zeros, range, moments and norms of every leaf, in one
pass) and `timeline` (how each leaf moved across a run's checkpoints).

Quantized groups (`inspector.quant_groups`, another branch) are not dequantized yet: their
packed integer members are scanned as integers. Once that lands, `scan` can dequantize each
group before its kernel (see docs/health.md).
"""
