# Sourced by scripts/*: make .venv with the package and its extras, and check Java.
# Idempotent: reinstalls only when pyproject.toml or the package list changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
    echo "==> installing $* with apt-get" >&2
    as_root apt-get update -qq
    DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    echo "error: Python 3.11+ is required (found: $("$PY" --version 2>&1 || echo none))." >&2
    echo "       Set PYTHON=/path/to/python3.11 to choose another interpreter." >&2
    exit 1
fi

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
if ! command -v java >/dev/null 2>&1 || [ "$(java_major)" -lt 17 ] 2>/dev/null; then
    if command -v apt-get >/dev/null 2>&1; then
        apt_install openjdk-17-jre-headless
    else
        echo "error: Java 17+ is required by Spark; install it and put java on PATH." >&2
        exit 1
    fi
fi

stamp_of() { cat pyproject.toml */__init__.py 2>/dev/null | sha1sum | cut -c1-12; }
STAMP=".venv/.installed-$(stamp_of)"
if [ ! -f "$STAMP" ]; then
    echo "==> preparing .venv (the package with its redis, test and bench extras)" >&2
    [ -x .venv/bin/python ] || "$PY" -m venv .venv
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
    .venv/bin/python -m pip install -q -e ".[redis,test,bench]"
    rm -f .venv/.installed-*
    touch "$STAMP"
fi
export PATH="$ROOT/.venv/bin:$PATH"
