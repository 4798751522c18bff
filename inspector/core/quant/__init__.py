"""Quantized weights: found as one logical weight each (`quant_groups`), dequantized as an op."""

from inspector.core.quant.groups import QuantGroup, quant_groups

__all__ = ["QuantGroup", "quant_groups"]
