"""hlofuse: a Python compiler for tensor programs built around operator fusion."""
