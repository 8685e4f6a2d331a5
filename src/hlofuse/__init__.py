"""hlofuse: a Python compiler for tensor programs built around operator fusion.

The public names load on first use, so `import hlofuse.ir.ops` (or any lower layer) does not
pull in the front end, the compiler and the runtime that `hlofuse.jit` needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hlofuse import lax, numpy, random
    from hlofuse.api import jit
    from hlofuse.jax_bridge import from_jax

__all__ = ["from_jax", "jit", "lax", "numpy", "random"]

# name -> (module, attribute in it, or None for the module itself)
_LAZY: dict[str, tuple[str, str | None]] = {
    "from_jax": ("hlofuse.jax_bridge", "from_jax"),
    "jit": ("hlofuse.api", "jit"),
    "lax": ("hlofuse.lax", None),
    "numpy": ("hlofuse.numpy", None),
    "random": ("hlofuse.random", None),
}


def __getattr__(name: str) -> Any:
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'hlofuse' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
