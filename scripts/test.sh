#!/usr/bin/env bash
# Runs the whole test suite on this machine, installing what it needs first: the wasm32-wasip2
# target, PostgreSQL server binaries (the system's, and 16, 17 and 18, on each of which a core
# subset runs; the failover tests need 17), the tests' S3 server, Azurite and fake-gcs-server, DuckDB and pyarrow
# (independent Parquet readers), podman, promtool and kubernetes-validate (the image, alert
# rules and manifest tests), the plugins the tests load, and the Python (componentize-py),
# JavaScript (jco) and C (clang, wasi-libc, wit-bindgen) toolchains that build the example
# plugins.
# Safe to run again: every step skips what is already there. Extra arguments go to `cargo test`.
# Without extra arguments the benchmark harness then runs once at its smallest size (debug
# build), so it keeps working; its figures do not decide the outcome, only whether it runs.
# TRIBUTARY_SKIP_BENCH=1 leaves it out. Respects CARGO_TARGET_DIR.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_cargo
ensure_wasm_target
ensure_postgres
ensure_tested_postgres_majors
ensure_test_s3
ensure_azurite
ensure_python_readers
ensure_fake_gcs
ensure_packaging_tools
build_plugins
build_guest_examples

say "tests: cargo test $*"
cd "$ROOT"
# The default members are the host side (runtime and tests); plugins and the guest SDK are
# built for wasm32-wasip2 above.
status=0
cargo test "$@" || status=$?
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ]; then
    # The guest SDK and the plugins' own unit tests run natively (tributary_guest::testing).
    say "tests: the guest SDK and plugin unit tests, natively"
    cargo test -p tributary-guest -p mask -p select -p router -p filter -p flatten || status=$?
fi
if [ "$status" -eq 0 ]; then say "tests: passed"; else say "tests: FAILED (exit $status)"; fi
if [ "$status" -eq 0 ] && [ "$#" -eq 0 ] && [ "${TRIBUTARY_SKIP_BENCH:-0}" != 1 ]; then
    say "bench: the harness at --quick size, one run (dev profile; figures are not checked)"
    # Its unit tests ran with the workspace's. Built beside the command, it links against the
    # runtime the tests built (alone, its features would differ and build it again).
    bench_target="${CARGO_TARGET_DIR:-$ROOT/target}"
    case "$bench_target" in /*) ;; *) bench_target="$ROOT/$bench_target" ;; esac
    { cargo build -p tributary-bench -p tributary-cli \
        && "$bench_target/debug/tributary-bench" --quick --strict; } || status=$?
    if [ "$status" -eq 0 ]; then say "bench: ran"; else say "bench: FAILED (exit $status)"; fi
fi
exit "$status"
