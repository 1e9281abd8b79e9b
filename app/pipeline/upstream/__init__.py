"""A plan answered by another OpenAI-compatible server, as the engine's events."""
