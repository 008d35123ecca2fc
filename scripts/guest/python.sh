# The Python guest: componentize-py turns the example plugins under examples/plugins/python
# into WebAssembly components of tributary:transform@1.0.0 (guest-sdk/wit/transform.wit).
# Sourced by scripts/lib.sh, not run: it uses ROOT, TOOLS, say and die from there.

COMPONENTIZE_PY_VERSION="0.25.1"
# The example plugins: each is a directory of examples/plugins/python with its code in app.py,
# built for the world `transform`. NAME-columnar is the module columnar.py of directory NAME,
# built for the world `columnar-transform` (it also takes batches by column). Every build gets
# the modules of examples/plugins/python/lib beside its own (the columnar ones import
# arrow_ipc from there). NAME-functions is the module functions.py of directory NAME, built for
# the world `columnar-functions` (columnar, and it imports the host's column functions).
PYTHON_EXAMPLES=(passthrough mask sandbox passthrough-columnar mask-columnar sandbox-columnar
    mask-functions)

# Makes componentize-py $COMPONENTIZE_PY_VERSION available in a virtual environment in the
# tools cache. Exports TRIBUTARY_COMPONENTIZE_PY, the executable.
ensure_python_guest() {
    local venv="$TOOLS/componentize-py"
    local bin="$venv/bin/componentize-py"
    local want="componentize-py $COMPONENTIZE_PY_VERSION"
    if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "$want" ]; then
        say "componentize-py: $COMPONENTIZE_PY_VERSION at $bin"
    else
        command -v python3 >/dev/null 2>&1 \
            || die "python3 not found; componentize-py, which builds the Python plugins, installs with pip (install python3 with its venv module)"
        if ! [ -x "$venv/bin/python" ] || ! "$venv/bin/python" -c '' >/dev/null 2>&1; then
            say "componentize-py: creating a virtual environment in $venv"
            python3 -m venv --clear "$venv" \
                || die "could not create a Python virtual environment in $venv (on Debian: apt-get install python3-venv)"
        fi
        say "componentize-py: installing $COMPONENTIZE_PY_VERSION into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "componentize-py==$COMPONENTIZE_PY_VERSION" \
            || die "pip could not install componentize-py==$COMPONENTIZE_PY_VERSION into $venv"
        [ "$("$bin" --version 2>/dev/null)" = "$want" ] \
            || die "installed componentize-py $COMPONENTIZE_PY_VERSION, but \`$bin --version\` does not say so"
    fi
    export TRIBUTARY_COMPONENTIZE_PY="$bin"
}

# Prints the source files of the plugin in directory $1, relative to it, one a line, sorted.
python_example_files() {
    (cd "$1" && find . -type f -name '*.py' -not -path '*/__pycache__/*' | LC_ALL=C sort)
}

# The directory of the modules every Python example may import.
python_example_lib() {
    printf '%s\n' "$ROOT/examples/plugins/python/lib"
}

# Prints the stamp of a build of the plugin in directory $1: a hash of its sources, the WIT,
# componentize-py's version and the build's options.
python_example_stamp() {
    local dir="$1" wit="$2" tool="$3" options="$4" file
    {
        printf 'tool %s\noptions %s\n' "$tool" "$options"
        printf 'wit %s %s\n' "$wit" "$(cat "$wit" "$wit"/*.wit "$wit"/deps/*/*.wit 2>/dev/null | sha256sum | cut -d' ' -f1)"
        while IFS= read -r file; do
            printf 'source %s %s\n' "$file" "$(sha256sum < "$dir/$file" | cut -d' ' -f1)"
        done < <(python_example_files "$dir")
        local lib; lib="$(python_example_lib)"
        while IFS= read -r file; do
            printf 'lib %s %s\n' "$file" "$(sha256sum < "$lib/$file" | cut -d' ' -f1)"
        done < <(python_example_files "$lib")
    } | sha256sum | cut -d' ' -f1
}

# Builds the Python example plugins into OUTDIR/python/NAME.wasm, skipping each one whose
# sources, WIT and componentize-py are those of its last build (OUTDIR/python/NAME.wasm.stamp).
build_python_examples() {
    local outdir="${1:-}"
    [ -n "$outdir" ] || die "usage: build_python_examples OUTDIR"
    [ -n "${TRIBUTARY_COMPONENTIZE_PY:-}" ] || ensure_python_guest
    local tool="$TRIBUTARY_COMPONENTIZE_PY"
    local venv; venv="$(cd "$(dirname "$tool")/.." && pwd)"
    # The contract as frozen (one world) for the plain plugins; the whole package, which adds
    # columnar.wit, for the columnar ones.
    local src="$ROOT/examples/plugins/python" wit
    [ -f "$ROOT/guest-sdk/wit/transform.wit" ] || die "the WIT contract $ROOT/guest-sdk/wit/transform.wit is missing"
    local version; version="$("$tool" --version)" || die "$tool --version failed"
    mkdir -p "$outdir/python"
    outdir="$(cd "$outdir" && pwd)"

    local name dir out stamp options staging file started ms size world module
    for name in "${PYTHON_EXAMPLES[@]}"; do
        case "$name" in
            *-columnar) dir="$src/${name%-columnar}" world="columnar-transform" module="columnar"
                wit="$ROOT/guest-sdk/wit" ;;
            *-functions) dir="$src/${name%-functions}" world="columnar-functions" module="functions"
                wit="$ROOT/guest-sdk/wit" ;;
            *) dir="$src/$name" world="transform" module="app" wit="$ROOT/guest-sdk/wit/transform.wit" ;;
        esac
        out="$outdir/python/$name.wasm"
        stamp="$out.stamp"
        [ -f "$dir/$module.py" ] || die "python plugin $name: $dir/$module.py is missing"
        options="-w $world componentize $module"
        local hash; hash="$(python_example_stamp "$dir" "$wit" "$version" "$options")"
        if [ -s "$out" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
            say "python plugin $name: up to date, not rebuilt ($out)"
            continue
        fi
        say "python plugin $name: building with $version"
        rm -f "$stamp"
        # Build from a copy of the sources: componentize-py bundles what its python path holds
        # and leaves __pycache__ there.
        staging="$(mktemp -d "${TMPDIR:-/tmp}/tributary-python-$name.XXXXXX")"
        mkdir -p "$staging/app"
        local lib; lib="$(python_example_lib)"
        while IFS= read -r file; do
            mkdir -p "$staging/app/$(dirname "$file")"
            cp "$lib/$file" "$staging/app/$file"
        done < <(python_example_files "$lib")
        while IFS= read -r file; do
            mkdir -p "$staging/app/$(dirname "$file")"
            cp "$dir/$file" "$staging/app/$file"
        done < <(python_example_files "$dir")
        started="$(date +%s%N)"
        # VIRTUAL_ENV names the venv whose site-packages componentize-py adds to the python
        # path (by default it would take the site-packages of whatever python3 is on PATH).
        if ! (cd "$staging" && VIRTUAL_ENV="$venv" "$tool" --quiet -d "$wit" -w "$world" \
                componentize -p "$staging/app" "$module" -o "$staging/out.wasm"); then
            rm -rf "$staging"
            die "python plugin $name: componentize-py failed (sources in $dir)"
        fi
        ms=$(( ($(date +%s%N) - started) / 1000000 ))
        mv -f "$staging/out.wasm" "$out"
        rm -rf "$staging"
        printf '%s\n' "$hash" > "$stamp"
        size="$(wc -c < "$out" | tr -d ' ')"
        say "python plugin $name: built $out ($size bytes) in $((ms / 1000)).$(( (ms % 1000) / 100 ))s"
    done
}
