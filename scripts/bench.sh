#!/usr/bin/env bash
# Runs the benchmark harness (bench/, method and figures in BENCHMARKS.md) on this machine,
# installing what it needs first, as scripts/test.sh does: the wasm32-wasip2 target,
# PostgreSQL server binaries, the tests' S3 server, and the passthrough and mask plugins.
# Arguments go to the harness: scenario names, --quick, --runs N, --json FILE, --help.
# BENCH_PROFILE picks the cargo profile (release by default; dev builds fast and runs slow).
# Respects CARGO_TARGET_DIR.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_cargo
ensure_wasm_target
ensure_postgres
ensure_test_s3
build_plugins passthrough mask

profile="${BENCH_PROFILE:-release}"
say "bench: cargo run --profile $profile -p tributary-bench -- $*"
cd "$ROOT"
exec cargo run --profile "$profile" -p tributary-bench -- "$@"
