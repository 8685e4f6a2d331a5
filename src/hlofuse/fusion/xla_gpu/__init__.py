"""XLA's current GPU fusion pipeline (jaxlib 0.10.2): priority fusion with its performance model,
today's multi-output fusion, and the passes around them (the `xla-gpu` strategy)."""
