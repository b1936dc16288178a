"""Iris: a job orchestrator for batch and ML work."""

__version__ = "0.1.0"
