"""The seeds a looped test runs, from an environment variable.

``"7"`` is seed 7, ``"1-25"`` seeds 1 to 25 inclusive, ``"3,5,8"`` those three; parts mix
(``"0-4,9"``). The loops before a release set the variable to 20 seeds or more; the default
suite runs each test's few default seeds.
"""

from __future__ import annotations

import os

__all__ = ["env_seeds", "parse_seeds"]


def parse_seeds(text: str) -> list[int]:
    """The seeds ``text`` names, in its order."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def env_seeds(variable: str, default: str) -> list[int]:
    """The seeds ``$variable`` names, or those ``default`` names when it is unset or empty."""
    return parse_seeds(os.environ.get(variable) or default)
