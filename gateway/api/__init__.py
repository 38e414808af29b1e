"""HTTP APIs: OpenAI chat completions, Anthropic messages, and the service routes."""
