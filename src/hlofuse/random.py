"""Counter-based random numbers, bit-for-bit those of jax.random: `hlofuse.random`."""

from hlofuse.frontend.random import (  # noqa: F401
    IMPLS,
    PRNGKey,
    bernoulli,
    bits,
    default_impl,
    fold_in,
    get_default_impl,
    key,
    normal,
    set_default_impl,
    split,
    threefry2x32,
    uniform,
)

__all__ = ["IMPLS", "PRNGKey", "bernoulli", "bits", "default_impl", "fold_in",
           "get_default_impl", "key", "normal", "set_default_impl", "split", "threefry2x32",
           "uniform"]
