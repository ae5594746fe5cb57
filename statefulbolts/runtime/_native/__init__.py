"""The runtime's modules written in C, each optional (``setup.py`` builds them if it can).

- ``_rowloop``: the inner loop of ``_rows.feed_rows``. Without it, the same loop runs in Python.
- ``_basicemit``: a ``BasicBolt``'s ``collector.emit([word])`` on a stream fields-grouped on
  that field (``_collector._TaskBasicCollector``). Without it, that ``emit`` is Python.

``_slots.h`` is what both read a class's slots with.

Nothing here imports anything: a module of this package is a leaf of the runtime.
"""
