"""Code generation: element expressions with index maps, kernels, C + OpenMP source."""
