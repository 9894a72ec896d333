"""Bellows: elastic GPU and batch-size scaling for deep-learning training jobs."""

__version__ = "0.1.0"
