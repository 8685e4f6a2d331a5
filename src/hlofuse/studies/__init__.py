"""The CartPole study: hlofuse's experiment table and the peers measured beside it."""
