"""Database: SQLAlchemy models and session handling, in one place."""
