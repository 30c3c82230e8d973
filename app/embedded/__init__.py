"""Embedded PostgreSQL and Redis for a machine without Docker (``wsrl services ...``).

Both run as daemons under ``<data_dir>`` and outlive the command that started them;
their URLs are recorded in ``<data_dir>/services.json`` where Settings finds them.
"""
