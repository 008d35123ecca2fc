#!/usr/bin/env bash
# Runs `tributary demo` on this machine, installing what it needs first: the wasm32-wasip2
# target, PostgreSQL server binaries and the passthrough plugin. Safe to run again: every step
# skips what is already there. Extra arguments go to `tributary demo` (see --help).
# Respects CARGO_TARGET_DIR.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_cargo
ensure_wasm_target
ensure_postgres
build_plugins passthrough

say "demo: building and running tributary demo $*"
cd "$ROOT"
exec cargo run --quiet -p tributary-cli -- demo --plugin "$TRIBUTARY_PLUGIN_DIR/passthrough.wasm" "$@"
