"""Celery app and tasks, the WebShop agent loop, the LLM client with token capture."""
