# The C example plugins (examples/plugins/c/): the toolchain they need and how they are built.
# Sourced by scripts/lib.sh, not run: it relies on ROOT, TOOLS, say, die and is_root from there.
#
#   ensure_c_guest                         clang, wasm-ld, wasi-libc and wit-bindgen, once
#   build_c_examples OUTDIR TRIBUTARY_BIN  OUTDIR/c/passthrough.wasm and OUTDIR/c/mask.wasm
#
# Every step says what it does and skips what is already there.

C_LLVM_VERSION="19"
C_WIT_BINDGEN_VERSION="0.46.0"
C_EXAMPLES=(passthrough mask)

# Whether the Debian package holding `what` is installed; `what` is a command or a file it
# ships. (Checked by what the build uses, so a toolchain put there another way counts too.)
c_have() {
    case "$1" in
        /*) [ -e "$1" ] ;;
        *) command -v "$1" >/dev/null 2>&1 ;;
    esac
}

# Prints the path of a wit-bindgen of the pinned version, if there is one.
find_c_wit_bindgen() {
    local candidate
    for candidate in "${TRIBUTARY_WIT_BINDGEN:-}" "$TOOLS/wit-bindgen/bin/wit-bindgen" \
        "$(command -v wit-bindgen 2>/dev/null || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] \
            && [ "$("$candidate" --version 2>/dev/null | awk '{print $2}')" = "$C_WIT_BINDGEN_VERSION" ]; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}

ensure_c_guest() {
    # Debian package, then what shows it is there.
    local -a wanted=(
        "clang-$C_LLVM_VERSION" "clang-$C_LLVM_VERSION"
        "lld-$C_LLVM_VERSION" "wasm-ld-$C_LLVM_VERSION"
        "wasi-libc" "/usr/lib/wasm32-wasi/libc.a"
        # clang links every wasm32 program against compiler-rt's builtins.
        "libclang-rt-$C_LLVM_VERSION-dev-wasm32" "/usr/lib/llvm-$C_LLVM_VERSION/lib/clang/$C_LLVM_VERSION/lib/wasi/libclang_rt.builtins-wasm32.a"
        "make" "make"
    )
    local -a missing=()
    local i
    for ((i = 0; i < ${#wanted[@]}; i += 2)); do
        if c_have "${wanted[i + 1]}"; then
            say "c guest: ${wanted[i]}: present"
        else
            missing+=("${wanted[i]}")
        fi
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        local -a sudo=()
        if ! is_root; then
            command -v sudo >/dev/null 2>&1 \
                || die "the C plugins need ${missing[*]}; install them (\`apt-get install ${missing[*]}\` as root) and run this again"
            sudo=(sudo)
        fi
        command -v apt-get >/dev/null 2>&1 \
            || die "the C plugins need ${missing[*]} (Debian package names) and this machine has no apt-get; install clang $C_LLVM_VERSION, wasm-ld and wasi-libc another way"
        say "c guest: installing ${missing[*]} with apt-get"
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
        for ((i = 0; i < ${#wanted[@]}; i += 2)); do
            c_have "${wanted[i + 1]}" || die "installed ${wanted[i]} but ${wanted[i + 1]} is still missing"
        done
    fi

    local bin
    if bin="$(find_c_wit_bindgen)"; then
        say "c guest: wit-bindgen $C_WIT_BINDGEN_VERSION at $bin"
    else
        if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
            export PATH="$HOME/.cargo/bin:$PATH"
        fi
        command -v cargo >/dev/null 2>&1 \
            || die "cargo not found; wit-bindgen-cli is installed with it (install Rust with rustup, https://rustup.rs)"
        say "c guest: installing wit-bindgen-cli $C_WIT_BINDGEN_VERSION into $TOOLS/wit-bindgen (about 5 minutes, once per machine)"
        cargo install --locked --root "$TOOLS/wit-bindgen" wit-bindgen-cli --version "$C_WIT_BINDGEN_VERSION"
        bin="$TOOLS/wit-bindgen/bin/wit-bindgen"
        find_c_wit_bindgen >/dev/null || die "wit-bindgen-cli was installed but $bin --version does not say $C_WIT_BINDGEN_VERSION"
    fi
    export TRIBUTARY_WIT_BINDGEN="$bin"
}

# What decides the C plugins' bytes: their sources, the contract, and the tools' versions. The
# tributary binary (which carries the componentizer and the WASI adapter) counts by its size
# and modification time: hashing a debug build whole takes seconds.
c_examples_stamp() {
    local tributary="$1"
    (
        cd "$ROOT"
        find examples/plugins/c -type f \( -name '*.c' -o -name '*.h' -o -name Makefile \) \
            -not -path '*/build/*' | LC_ALL=C sort | xargs sha256sum
        sha256sum guest-sdk/wit/*.wit
        "clang-$C_LLVM_VERSION" --version | head -n 1
        "wasm-ld-$C_LLVM_VERSION" --version | head -n 1
        dpkg-query -W -f='wasi-libc ${Version}\n' wasi-libc 2>/dev/null || true
        "$TRIBUTARY_WIT_BINDGEN" --version
        stat -L -c 'tributary %s %Y' "$tributary"
    ) | sha256sum | awk '{print $1}'
}

build_c_examples() {
    [ "$#" -eq 2 ] || die "usage: build_c_examples OUTDIR TRIBUTARY_BIN"
    local outdir="$1" tributary="$2"
    [ -x "$tributary" ] || die "build_c_examples: $tributary is not an executable tributary binary"
    case "$tributary" in /*) ;; *) tributary="$PWD/$tributary" ;; esac
    c_have "clang-$C_LLVM_VERSION" && [ -n "${TRIBUTARY_WIT_BINDGEN:-}" ] \
        || die "build_c_examples: the C toolchain is not set up; call ensure_c_guest first"
    mkdir -p "$outdir/c"
    outdir="$(cd "$outdir/c" && pwd)"

    local stamp_file="$outdir/.stamp" stamp name
    stamp="$(c_examples_stamp "$tributary")"
    local fresh=1
    [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp" ] || fresh=0
    for name in "${C_EXAMPLES[@]}"; do [ -f "$outdir/$name.wasm" ] || fresh=0; done
    if [ "$fresh" -eq 1 ]; then
        say "c examples: up to date in $outdir (sources, WIT and tools unchanged)"
        return 0
    fi

    local start end
    start="$(date +%s%N)"
    # The native tests run under ASan and UBSan where the host compiler can link them.
    local hostcc="cc" hostcflags=() probe
    command -v cc >/dev/null 2>&1 || hostcc="clang-$C_LLVM_VERSION"
    probe="$(mktemp -d)"
    if printf 'int main(void) { return 0; }\n' >"$probe/p.c" \
        && "$hostcc" -fsanitize=address,undefined "$probe/p.c" -o "$probe/p" >/dev/null 2>&1 \
        && "$probe/p"; then
        say "c examples: native tests with $hostcc under the address and undefined-behaviour sanitizers"
    else
        hostcflags=("HOSTCFLAGS=-O1 -g")
        say "c examples: native tests with $hostcc, without sanitizers (it cannot link them here)"
    fi
    rm -rf "$probe"

    say "c examples: building ${C_EXAMPLES[*]} with clang-$C_LLVM_VERSION -O2 into $outdir"
    rm -f "$stamp_file"
    # -B: something the Makefile does not track (a tool, the tributary binary) may have changed.
    make --no-print-directory -B -C "$ROOT/examples/plugins/c" \
        CC="clang-$C_LLVM_VERSION" \
        HOSTCC="$hostcc" "${hostcflags[@]}" \
        WIT_BINDGEN="$TRIBUTARY_WIT_BINDGEN" \
        TRIBUTARY="$tributary" \
        WIT="$ROOT/guest-sdk/wit" \
        BUILD="$outdir/build" \
        OUT="$outdir" \
        all >&2
    echo "$stamp" >"$stamp_file"
    end="$(date +%s%N)"
    local ms=$(( (end - start) / 1000000 )) built=""
    for name in "${C_EXAMPLES[@]}"; do
        built+="${built:+, }$name.wasm ($(wc -c <"$outdir/$name.wasm") bytes)"
    done
    say "c examples: built $built in $((ms / 1000)).$(( ms % 1000 / 100 )) s"
}
