"""The Jupyter layer: the widget, the `%bwd_extract` magic. The only place IPython and ipywidgets are imported."""
