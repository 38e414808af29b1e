"""Strata's HTTP gateway: OpenAI- and Anthropic-compatible APIs in front of `strata --serve`."""
