"""The CartPole peers: the same workload in NumPy, Gymnasium, JAX, PyTorch, C and hlofuse."""
