"""Reference semantics: NumPy evaluation of any module (the oracle), and the NumPy libraries
behind hlofuse's own calls (Threefry, the linear-algebra routines)."""
