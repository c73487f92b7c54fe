"""The OpenAI-compatible HTTP edge: its own process in front of the router (``python -m openai_server``)."""
