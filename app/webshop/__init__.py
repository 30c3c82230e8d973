"""The WebShop environment. Imports nothing else of this project."""
