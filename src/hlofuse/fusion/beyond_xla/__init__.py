"""hlofuse's own fusion passes, where the study found XLA timid: priority fusion priced by a
cost model of this machine, and whole-loop fusion (the `priority` and `max` strategies)."""
