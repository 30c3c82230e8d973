"""Exports of the database for training frameworks and analysis (``wsrl export``).

Both exports stream: rows come from a server-side cursor in batches and are written as
they come (JSON lines, or Parquet row groups), so memory stays bounded by the batch size
whatever the number of trajectories. They only read the database.
"""
