"""Headless Chromium for the dashboard tests: the rendered DOM of a page, and a screenshot.

Chromium (Debian's ``chromium`` package; ``scripts/test`` installs it) runs with its own profile
in a temporary folder, no sandbox (containers), no GPU, and a host resolver that knows
127.0.0.1 only, so the page can reach nothing but the dashboard. Only ``http://127.0.0.1:``
URLs are accepted. ``--virtual-time-budget`` lets the page's timers and fetches run before the
DOM is dumped or the picture taken.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

LOOPBACK = "http://127.0.0.1:"
_MISSING = (
    "chromium is not on PATH. Run the test command from the README, which installs it "
    "(apt-get install -y chromium), or install Debian's chromium package yourself."
)


def chromium_path() -> str:
    """The chromium executable, or an error that says how to get it."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        raise RuntimeError(_MISSING)
    return found


def _run(url: str, *flags: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    if not url.startswith(LOOPBACK):
        msg = f"the dashboard tests load 127.0.0.1 pages only, not {url!r}"
        raise ValueError(msg)
    with tempfile.TemporaryDirectory(prefix="sb-chromium-") as profile:
        args = [
            chromium_path(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-default-apps",
            "--metrics-recording-only",
            "--hide-scrollbars",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            f"--user-data-dir={profile}",
            *flags,
            url,
        ]
        env = {**os.environ, "HOME": profile}
        return subprocess.run(
            args, capture_output=True, text=True, timeout=timeout, env=env, check=False
        )


def dump_dom(url: str, budget_ms: int = 5000) -> str:
    """The page's DOM after its scripts ran for ``budget_ms`` of virtual time."""
    done = _run(url, f"--virtual-time-budget={budget_ms}", "--dump-dom")
    if done.returncode != 0 or "<html" not in done.stdout:
        msg = f"chromium --dump-dom {url} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return done.stdout


def screenshot(
    url: str, path: Path, size: tuple[int, int] = (1400, 1000), budget_ms: int = 5000
) -> Path:
    """A PNG of the page at ``size`` after ``budget_ms`` of virtual time."""
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    done = _run(
        url,
        f"--virtual-time-budget={budget_ms}",
        f"--window-size={size[0]},{size[1]}",
        f"--screenshot={path}",
    )
    if done.returncode != 0 or not path.exists():
        msg = f"chromium --screenshot {url} failed ({done.returncode}): {done.stderr[-2000:]}"
        raise RuntimeError(msg)
    return path


def png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    data = Path(path).read_bytes()[:24]
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        msg = f"{path} is not a PNG"
        raise ValueError(msg)
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
