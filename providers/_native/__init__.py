"""The state providers' modules written in C, each optional (``setup.py`` builds them if it can).

- ``_fresh``: ``LayeredKeyValueState``'s ``get`` and ``put`` of a ``str`` key of the fresh layer.
  Without it, the Python methods take every call.

Nothing here imports anything: a module of this package is a leaf of the providers.
"""
