"""hlofuse: a Python compiler for tensor programs built around operator fusion."""

from hlofuse import lax, numpy, random
from hlofuse.api import jit

__all__ = ["jit", "lax", "numpy", "random"]
