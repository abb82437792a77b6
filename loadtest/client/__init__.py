"""The wire: OpenAI request bodies, server-sent events, the target's /metrics (pure)."""
