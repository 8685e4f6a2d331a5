"""XLA's own GPU compiler as the oracle for `xla-gpu`: compiling a program with XLA for a GPU
without one (`oracle.py`, `xla_child.py`; optional extra `xla-gpu`) and comparing XLA's
kernels with `xla-gpu`'s (`compare.py`; needs no extra)."""
