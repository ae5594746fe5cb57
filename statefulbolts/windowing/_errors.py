"""The windowing branch of the error tree; ``statefulbolts.errors`` draws the rest.

::

    StatefulBoltsError
    └── WindowingError                          a windowed bolt or its window manager
        ├── WindowConfigError (ConfigError)     a window that cannot be built as asked
        ├── WindowTimeError (ValueError)        a timestamp that is not one, or is missing
        └── WindowStateError (ValueError)       a snapshot ``restore`` cannot take
"""

from __future__ import annotations

from statefulbolts.errors import ConfigError, StatefulBoltsError


class WindowingError(StatefulBoltsError):
    """Something about a windowed bolt or its window manager went wrong."""


class WindowConfigError(WindowingError, ConfigError):
    """The window configuration is invalid; the message names the setting and the fix."""


class WindowTimeError(WindowingError, ValueError):
    """A timestamp is not an integer of milliseconds, or a tuple has no timestamp field."""


class WindowStateError(WindowingError, ValueError):
    """A snapshot cannot be restored: not ours, corrupt, or taken under another window."""
