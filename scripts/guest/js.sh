# The JavaScript example plugins (examples/plugins/js): the tools that build them, and the
# build. Sourced by scripts/lib.sh, which defines ROOT, TOOLS, say and die (and set -euo
# pipefail). Every step says what it does and skips what is already there.
#
#   ensure_js_guest            jco and componentize-js, at the versions pinned in the
#                              examples' package.json, in $TOOLS/jco; exports TRIBUTARY_JCO
#                              and, when jco ships one, TRIBUTARY_PREVIEW1_ADAPTER
#   build_js_examples OUTDIR   OUTDIR/js/passthrough.wasm, mask.wasm, their columnar
#                              variants passthrough-columnar.wasm, mask-columnar.wasm, and
#                              mask-functions.wasm (columnar, on the host's column functions)

JS_EXAMPLES="$ROOT/examples/plugins/js"
JS_NODE_MAJOR_MIN=20
# The plugins: NAME is src/NAME.js, built for the world `transform` by `jco componentize`;
# NAME-columnar imports NAME.js (and arrow-ipc.js), so it is built for the world
# `columnar-transform` by componentize.mjs, which lets ComponentizeJS resolve the imports;
# NAME-functions likewise, for the world `columnar-functions` (it imports the host's column
# functions).
JS_PLUGINS=(passthrough mask passthrough-columnar mask-columnar mask-functions)
# The WASI features of the JS engine that the plugins leave out. stdio stays: what a plugin
# prints (and the message of an exception that escapes it) lands in the host log.
JS_DISABLED_FEATURES=(http fetch-event clocks random)

# Prints the version of npm package $2 installed under node_modules directory $1, if any.
_js_installed_version() {
    local manifest="$1/$2/package.json"
    [ -f "$manifest" ] || return 0
    node -p 'require(process.argv[1]).version' "$manifest"
}

# Prints the version of npm package $1 pinned in the examples' package.json.
_js_pinned_version() {
    node -p 'require(process.argv[1]).devDependencies[process.argv[2]]' "$JS_EXAMPLES/package.json" "$1"
}

ensure_js_guest() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 \
        || die "node and npm not found; the JavaScript plugins are built with jco, which needs Node.js $JS_NODE_MAJOR_MIN or newer (install it from your package manager or nodejs.org), then run this again"
    local node_version major
    node_version="$(node --version)"
    major="${node_version#v}"
    major="${major%%.*}"
    [ "$major" -ge "$JS_NODE_MAJOR_MIN" ] 2>/dev/null \
        || die "node $node_version is too old; jco and componentize-js need Node.js $JS_NODE_MAJOR_MIN or newer"

    local dir="$TOOLS/jco" jco_version cjs_version
    jco_version="$(_js_pinned_version @bytecodealliance/jco)"
    cjs_version="$(_js_pinned_version @bytecodealliance/componentize-js)"
    local modules="$dir/node_modules/@bytecodealliance"
    if [ "$(_js_installed_version "$modules" jco)" = "$jco_version" ] \
        && [ "$(_js_installed_version "$modules" componentize-js)" = "$cjs_version" ] \
        && cmp -s "$JS_EXAMPLES/package-lock.json" "$dir/package-lock.json" \
        && [ -x "$dir/node_modules/.bin/jco" ]; then
        say "js guest tools: jco $jco_version, componentize-js $cjs_version in $dir: present"
    else
        say "js guest tools: installing jco $jco_version and componentize-js $cjs_version into $dir (node $node_version)"
        mkdir -p "$dir"
        # The examples' manifest and lock file, so the tools are exactly the ones they pin.
        cp "$JS_EXAMPLES/package.json" "$JS_EXAMPLES/package-lock.json" "$dir/"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) \
            || die "npm ci in $dir failed (the npm registry must be reachable)"
        [ "$(_js_installed_version "$modules" jco)" = "$jco_version" ] \
            && [ "$(_js_installed_version "$modules" componentize-js)" = "$cjs_version" ] \
            || die "npm installed other versions in $dir than jco $jco_version and componentize-js $cjs_version"
    fi
    export TRIBUTARY_JCO="$dir/node_modules/.bin/jco"

    local adapter
    adapter="$(find "$modules/jco" -name wasi_snapshot_preview1.reactor.wasm -type f 2>/dev/null | head -n 1)"
    if [ -n "$adapter" ]; then
        export TRIBUTARY_PREVIEW1_ADAPTER="$adapter"
    else
        say "js guest tools: jco $jco_version ships no wasi_snapshot_preview1.reactor.wasm; TRIBUTARY_PREVIEW1_ADAPTER not set"
    fi
}

# Prints a hash of everything a build of the JS examples depends on.
_js_build_stamp() {
    local modules="$TOOLS/jco/node_modules/@bytecodealliance"
    {
        sha256sum "$JS_EXAMPLES"/src/*.js "$JS_EXAMPLES/componentize.mjs" \
            "$ROOT"/guest-sdk/wit/*.wit "$ROOT"/guest-sdk/wit/deps/*/*.wit \
            "$JS_EXAMPLES/package-lock.json" "${BASH_SOURCE[0]}" | sed "s| $ROOT/| |"
        echo "jco $(_js_installed_version "$modules" jco)"
        echo "componentize-js $(_js_installed_version "$modules" componentize-js)"
        echo "node $(node --version)"
        echo "disabled ${JS_DISABLED_FEATURES[*]}"
    } | sha256sum | cut -d ' ' -f 1
}

build_js_examples() {
    local outdir="${1:-}"
    [ -n "$outdir" ] || die "build_js_examples: give the output directory"
    if [ "${TRIBUTARY_JCO:-}" != "$TOOLS/jco/node_modules/.bin/jco" ] || [ ! -x "$TRIBUTARY_JCO" ]; then
        ensure_js_guest
    fi
    local out="$outdir/js" stamp want plugin said built=1
    stamp="$outdir/js/.stamp"
    want="$(_js_build_stamp)"
    for plugin in "${JS_PLUGINS[@]}"; do
        [ -f "$out/$plugin.wasm" ] || built=0
    done
    if [ "$built" = 1 ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        say "js plugins: ${JS_PLUGINS[*]} in $out are up to date (sources, WIT and tools unchanged)"
        return 0
    fi
    mkdir -p "$out"
    rm -f "$stamp"
    # componentize.mjs imports ComponentizeJS from the node_modules beside it.
    cp "$JS_EXAMPLES/componentize.mjs" "$TOOLS/jco/componentize.mjs"
    local wit="$ROOT/guest-sdk/wit/transform.wit"
    for plugin in "${JS_PLUGINS[@]}"; do
        local started=$SECONDS source="$JS_EXAMPLES/src/$plugin.js"
        local world=columnar-transform
        case "$plugin" in
            *-functions) world=columnar-functions ;;
        esac
        case "$plugin" in
            *-columnar | *-functions)
                say "js plugins: building $plugin with ComponentizeJS (componentize.mjs)"
                # The whole package: columnar.wit and functions.wit beside the frozen
                # transform.wit, and the column functions' package in deps/.
                said="$(node "$TOOLS/jco/componentize.mjs" "$source" "$ROOT/guest-sdk/wit" "$world" \
                    "$out/$plugin.wasm.partial" "${JS_DISABLED_FEATURES[@]}" 2>&1)" || {
                    printf '%s\n' "$said" >&2
                    die "componentize.mjs failed for $source"
                }
                ;;
            *)
                say "js plugins: building $plugin with jco componentize"
                said="$("$TRIBUTARY_JCO" componentize "$source" --wit "$wit" --world-name transform \
                    --disable "${JS_DISABLED_FEATURES[@]}" \
                    --out "$out/$plugin.wasm.partial" 2>&1)" || {
                    printf '%s\n' "$said" >&2
                    die "jco componentize failed for $source"
                }
                ;;
        esac
        mv "$out/$plugin.wasm.partial" "$out/$plugin.wasm"
        say "js plugins: built $out/$plugin.wasm ($(( $(wc -c <"$out/$plugin.wasm") / 1024 )) KiB) in $(( SECONDS - started )) s"
    done
    echo "$want" >"$stamp"
}
