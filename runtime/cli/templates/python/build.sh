#!/bin/sh
# Builds {{name}}.wasm from app.py with componentize-py (COMPONENTIZE_PY names another one).
set -eu
cd "$(dirname "$0")"
if [ -z "${COMPONENTIZE_PY:-}" ] && [ -x .venv/bin/componentize-py ]; then
    COMPONENTIZE_PY=.venv/bin/componentize-py
fi
COMPONENTIZE_PY="${COMPONENTIZE_PY:-componentize-py}"
if ! command -v "$COMPONENTIZE_PY" >/dev/null 2>&1; then
    echo "build.sh: $COMPONENTIZE_PY not found; install it here with:" >&2
    echo "  python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1" >&2
    exit 127
fi
"$COMPONENTIZE_PY" -d wit/transform.wit -w transform componentize -p . app -o {{name}}.wasm
echo "built {{name}}.wasm"
