"""webshop-rl: services a person or another program talks to (env, API, DB, CLI)."""
