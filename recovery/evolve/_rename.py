"""Renamed components: which stored state a wanted id takes (``topology.state.renames``).

A mapping ``{old: new}`` applies once the topology has the new id and no longer the old one: it
may be set ahead of the deploy that renames, and stays harmless after it. State stored under
both ids is refused: one of them must be dropped first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from statefulbolts.state import ComponentShape

__all__ = ["Renames", "renames_of"]


class Renames(NamedTuple):
    """The renames that apply: each renamed component's stored id, and the refusals."""

    stored_as: dict[str, str]  # new id -> the old id its state is stored under
    refusals: list[str]


def renames_of(
    renames: Mapping[str, str] | None,
    stored: Mapping[str, ComponentShape],
    wanted: Mapping[str, ComponentShape],
    label: str,
) -> Renames:
    """The mappings of ``renames`` that apply to ``stored`` state and ``wanted`` components."""
    renamed = {
        old: new
        for old, new in (renames or {}).items()
        if old in stored and new in wanted and old not in wanted
    }
    refusals: list[str] = []
    for old, new in renamed.items():
        if new in stored:
            refusals.append(
                f"{label}: topology.state.renames maps {old!r} to {new!r}, but state of both is "
                f"stored; drop one first (statefulbolts state drop --component ...)"
            )
    return Renames({new: old for old, new in renamed.items() if new not in stored}, refusals)
