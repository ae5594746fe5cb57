# Sourced by scripts/*: check Python and Java, and make a virtualenv on demand (ensure_venv).
# Idempotent: a venv is reinstalled only when pyproject.toml, setup.py or the package list changed.
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

stamp_of() { cat pyproject.toml setup.py */__init__.py 2>/dev/null | sha1sum | cut -c1-12; }

# ensure_venv DIR KIND WHAT...: DIR holds the package (editable) and WHAT (pip requirements,
# e.g. ".[redis,ui]"), stamped KIND with WHAT. A .venv stamped "full" (scripts/test) serves every
# kind: scripts/wordcount runs in it as it is, and scripts/test completes a "run" .venv.
ensure_venv() {
    local dir="$1" kind="$2"
    shift 2
    local stamp="$dir/.installed-$kind-$(stamp_of)"
    if [ "$(cat "$stamp" 2>/dev/null)" = "$*" ]; then
        return 0
    fi
    if [ "$kind" != full ] && [ -f "$dir/.installed-full-$(stamp_of)" ]; then
        return 0
    fi
    echo "==> preparing $dir: pip install -e $*" >&2
    [ -x "$dir/bin/python" ] || "$PY" -m venv "$dir"
    "$dir/bin/python" -m pip install -q --upgrade pip >/dev/null
    "$dir/bin/python" -m pip install -q -e "$@"
    rm -f "$dir"/.installed-*
    printf '%s\n' "$*" >"$stamp"
}
