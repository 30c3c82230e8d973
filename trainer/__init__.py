"""Scheduler, batch assembly, backends (local, verl), policy publication, tiny policy."""
