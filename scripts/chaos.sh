#!/usr/bin/env bash
# Runs the chaos test (tests/e2e/chaos.rs, docs/reliability.md) on this machine, installing
# what it needs first as scripts/test.sh does: PostgreSQL server binaries and the tests' S3
# server. `scripts/chaos.sh` runs the long mode (500+ kills, about an hour); `scripts/chaos.sh
# ci` runs the CI mode (about five minutes) alone. TRIBUTARY_CHAOS_SEED=<seed> replays a seed's
# schedule; TRIBUTARY_CHAOS_KEEP=1 keeps every run's log of a passing run too. The test prints
# its progress and, at the end, the figures docs/reliability.md records. Respects
# CARGO_TARGET_DIR.

source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

case "${1:-long}" in
    long) filter=chaos::long_mode; ignored=--ignored ;;
    ci) filter=chaos::kills_and_outages; ignored= ;;
    *) die "usage: scripts/chaos.sh [long|ci]" ;;
esac

ensure_cargo
ensure_postgres
ensure_test_s3

cd "$ROOT"
say "chaos: building tributary (with its failpoints, as the test suite does)"
cargo build -p tributary-cli --features tributary/failpoints
say "chaos: ${1:-long} mode, seed ${TRIBUTARY_CHAOS_SEED:-new}"
exec cargo test -p tributary-tests --test e2e -- $ignored --nocapture "$filter"
