"""Torch-only core: capture, traces and partitions, analysis, the partitioner registry, code generation.

Nothing here imports IPython, ipywidgets or a view.
"""
