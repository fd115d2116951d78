"""Extraction, the first operations layer: `extract` runs a model through AOT Autograd (`extract.py`), reusing a
trace when torch's inputs to it are unchanged (`cache.py`), and returns a `BackwardExtraction` (`result.py`).

Imports: `core` and `graphnet` only.
"""

from .result import BackwardExtraction

__all__ = ["BackwardExtraction"]
