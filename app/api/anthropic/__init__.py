"""Anthropic's Messages API (`/v1/messages`): a thin adapter over the one request plan."""
