"""hycache: a prefix cache for hybrid LLMs (full attention, sliding window, recurrent layers)."""

__version__ = "0.1.0"
