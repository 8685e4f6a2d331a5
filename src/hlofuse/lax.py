"""Structured control flow and low-level operations, like jax.lax: `hlofuse.lax`."""

from hlofuse.frontend.control_flow import (  # noqa: F401
    cond,
    fori_loop,
    scan,
    select,
    switch,
    while_loop,
)
from hlofuse.frontend.lax_extras import (  # noqa: F401
    bitcast_convert_type,
    broadcast_in_dim,
    convert_element_type,
    dynamic_slice,
    dynamic_update_slice,
    erf_inv,
    iota,
    shift_right_logical,
)

__all__ = ["bitcast_convert_type", "broadcast_in_dim", "cond", "convert_element_type",
           "dynamic_slice", "dynamic_update_slice", "erf_inv", "fori_loop", "iota", "scan",
           "select", "shift_right_logical", "switch", "while_loop"]
