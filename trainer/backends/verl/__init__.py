"""The verl backend: verl 0.9.1 trains, our Celery workers generate. See README.md here."""
