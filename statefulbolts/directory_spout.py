"""Moved to ``statefulbolts.connectors.files``; this old path warns once and re-exports it."""

from statefulbolts._moved import warn_moved
from statefulbolts.connectors.files import DirectorySpout

__all__ = ["DirectorySpout"]

warn_moved("statefulbolts.directory_spout", __name__)
