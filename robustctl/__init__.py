"""robustctl: rapid isolation for large LLM training jobs."""

__version__ = "0.1.0"
