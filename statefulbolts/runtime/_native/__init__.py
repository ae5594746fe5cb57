"""The runtime's modules written in C, each optional (``setup.py`` builds them if it can).

- ``_rowloop``: the inner loop of ``_rows.feed_rows``. Without it, the same loop runs in Python.

Nothing here imports anything: a module of this package is a leaf of the runtime.
"""
