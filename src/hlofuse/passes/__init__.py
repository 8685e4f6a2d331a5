"""Module-to-module passes: the pass manager and the simplifications run before fusion."""
