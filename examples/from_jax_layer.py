"""A JAX function compiled and run by hlofuse (README, "From JAX"), checked against NumPy.

    pip install 'hlofuse[jax]'
    python examples/from_jax_layer.py

JAX traces and lowers the function; hlofuse parses JAX's HLO, fuses it and runs it as C.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import hlofuse


@hlofuse.from_jax
def layer(params: dict[str, jnp.ndarray], x: jnp.ndarray) -> jnp.ndarray:
    return jnp.tanh(x @ params["w"] + params["b"])


def main() -> None:
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((3, 4)).astype(np.float32),
              "b": rng.standard_normal(4).astype(np.float32)}
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = layer(params, x)
    expected = np.tanh(x @ params["w"] + params["b"])
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    kernels = len(layer.compiled(params, x).kernels)
    print(f"from_jax: tanh(x @ w + b) for x of shape {x.shape} ran on hlofuse as {kernels} "
          "kernel(s) and matches NumPy")


if __name__ == "__main__":
    main()
