#!/usr/bin/env bash
# Prepares this machine for `tributary demo`: the wasm32-wasip2 target, PostgreSQL server
# binaries and the passthrough plugin. Safe to run again. Respects CARGO_TARGET_DIR.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_cargo
ensure_wasm_target
ensure_postgres
build_plugins passthrough
say "demo prerequisites: ready (plugins in $TRIBUTARY_PLUGIN_DIR)"
