"""Differential fuzzing of hlofuse against JAX (`make fuzz`, `python -m tests.fuzz`)."""
