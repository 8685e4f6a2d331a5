"""XLA's 2022 GPU fusion passes, as the study read them: instruction fusion, fusion merger,
multi-output and horizontal fusion, tree-reduction rewriting (the `xla` strategy)."""
