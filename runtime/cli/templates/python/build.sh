#!/bin/sh
# Builds {{name}}.wasm from app.py with componentize-py (COMPONENTIZE_PY names another one).
set -eu
cd "$(dirname "$0")"
COMPONENTIZE_PY="${COMPONENTIZE_PY:-componentize-py}"
"$COMPONENTIZE_PY" -d wit/transform.wit -w transform componentize -p . app -o {{name}}.wasm
echo "built {{name}}.wasm"
