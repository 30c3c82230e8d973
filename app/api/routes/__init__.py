"""One routes module per API resource."""
