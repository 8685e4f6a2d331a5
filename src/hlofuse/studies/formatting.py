"""Rates as the study's tables and plots print them (k, M, G suffixes, three digits)."""

from __future__ import annotations


def format_rate(value: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"
