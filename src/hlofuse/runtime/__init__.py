"""Target-neutral lowering: the thunk program, buffer assignment, the generate loop and driver
every source target shares, the `Target` interface, plans and per-kernel profiles."""
