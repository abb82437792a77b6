"""The loadtest version (also the ``tool_version`` of every summary)."""

__version__ = "0.1.0"
