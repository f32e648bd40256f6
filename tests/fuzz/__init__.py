"""A differential fuzzer: random small programs run compiled by surge and eagerly."""
