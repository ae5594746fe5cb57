"""The dashboard's third-party dependencies, checked first: missing, they fail with the command."""

from __future__ import annotations

__all__ = ["INSTALL"]

INSTALL = "pip install 'statefulbolts[ui]'"

try:
    import prometheus_client  # noqa: F401 - imported to fail early, with the command
    import starlette  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    msg = f"the dashboard needs Starlette, uvicorn and prometheus_client: {INSTALL} ({exc})"
    raise ImportError(msg) from exc
