"""The front end: traces Python functions on abstract values into HLO modules."""
