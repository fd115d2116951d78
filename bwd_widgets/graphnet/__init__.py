"""GraphNet's sample format, in and out: read a sample (`sample.py`), its files and their rewrites
(`files.py`), write an extraction as GraphNet's own extractor does (`writer.py`), and GraphNet's validation of a
written sample (`validate.py`).

Imports: `core` only.
"""

from .sample import GraphNetSample, TensorMeta, build_tensor, load_graphnet_sample, map_device_strings, read_metas

__all__ = ["GraphNetSample", "TensorMeta", "build_tensor", "load_graphnet_sample", "map_device_strings", "read_metas"]
