"""``wsrl chaos``: the pipeline trains on worker hosts (network namespaces) under random
faults; afterwards the invariants are checked from Postgres and Redis (docs/chaos.md)."""
