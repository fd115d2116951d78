"""Views of an extraction: the typed payload, static DOT/SVG and a self-contained HTML page. No IPython."""
