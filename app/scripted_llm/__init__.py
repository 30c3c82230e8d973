"""The scripted LLM server: an OpenAI-compatible stand-in that plays a WebShop policy.

It is the one stand-in the test suite allows: it speaks the chat protocol with vLLM's
token capture fields, plays the oracle or the rule policy from the agent's prompt, and can
be told to be slow, fail, hang or talk nonsense.
"""

from app.scripted_llm.app import create_app

__all__ = ["create_app"]
