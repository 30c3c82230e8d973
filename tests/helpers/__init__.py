"""Reusable test helpers: process launchers for the services of a real deployment."""
