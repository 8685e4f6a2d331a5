"""The mutable graphs the fusion passes work on, and the surgery that forms fusions in them."""
