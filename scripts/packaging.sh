# The tools the packaging tests use (tests/e2e/packaging.rs): a container engine to build and
# run the image, promtool to check the alert rules, and kubernetes-validate to check the
# manifest against the Kubernetes schema offline. Sourced by lib.sh, not run. Every step skips
# what is already there.

# The Prometheus release of Debian 12's archive; promtool is taken from its package alone (the
# package would also install and start a Prometheus server, which the tests do not want).
PROMETHEUS_DEB="prometheus"
KUBERNETES_VALIDATE_VERSION="1.37.0"

# podman builds and runs the image. runc comes with it: on a host with cgroup v1 controllers
# beside a cgroup v2 hierarchy (a "hybrid" host), crun, podman's default runtime, refuses to
# start any container, and runc does not. busybox-static is the image's health check client
# (the Dockerfile's build stage installs it too).
CONTAINER_PACKAGES=(podman runc busybox-static)
ensure_container_tools() {
    if command -v podman >/dev/null 2>&1 && command -v runc >/dev/null 2>&1 \
        && command -v busybox >/dev/null 2>&1; then
        say "container tools: $(podman --version), $(runc --version | head -n 1)"
        return 0
    fi
    if ! is_root || ! command -v apt-get >/dev/null 2>&1; then
        say "container tools: some of ${CONTAINER_PACKAGES[*]} missing and not root here; the image tests will say how to install them"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    say "container tools: installing ${CONTAINER_PACKAGES[*]} with apt-get"
    apt-get update
    apt-get install -y --no-install-recommends "${CONTAINER_PACKAGES[@]}"
    say "container tools: $(podman --version), $(runc --version | head -n 1)"
}

# Prints the path of a working promtool, if there is one.
find_promtool() {
    local candidate
    for candidate in "${TRIBUTARY_PROMTOOL:-}" "$(command -v promtool 2>/dev/null || true)" "$TOOLS/bin/promtool"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ] && "$candidate" --version >/dev/null 2>&1; then
            echo "$candidate"; return 0
        fi
    done
    return 1
}

ensure_promtool() {
    local bin
    if bin="$(find_promtool)"; then
        say "promtool: $("$bin" --version 2>&1 | head -n 1) at $bin"
    else
        command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 \
            || die "promtool not found; the alert rules are checked with it (install Prometheus's promtool, or set TRIBUTARY_PROMTOOL)"
        say "promtool: taking it from Debian's $PROMETHEUS_DEB package into $TOOLS/bin"
        local work
        work="$(mktemp -d)"
        chmod 0755 "$work"   # apt-get download runs as the _apt user where it can
        if ! (cd "$work" && apt-get download "$PROMETHEUS_DEB" >/dev/null 2>&1); then
            # An archive list never fetched on this machine knows no packages yet.
            is_root && apt-get update >/dev/null
            (cd "$work" && apt-get download "$PROMETHEUS_DEB" >/dev/null 2>&1) \
                || die "apt-get download $PROMETHEUS_DEB failed (Debian's archive must be reachable; as root, apt-get update first)"
        fi
        dpkg-deb -x "$work"/*.deb "$work/root"
        mkdir -p "$TOOLS/bin"
        install -m 0755 "$work/root/usr/bin/promtool" "$TOOLS/bin/promtool"
        rm -rf "$work"
        bin="$TOOLS/bin/promtool"
        "$bin" --version >/dev/null 2>&1 || die "promtool was installed but $bin --version fails"
        say "promtool: $("$bin" --version 2>&1 | head -n 1) at $bin"
    fi
    export TRIBUTARY_PROMTOOL="$bin"
}

# kubernetes-validate (it ships the Kubernetes schemas, so it needs no cluster and no network)
# in the tools' Python environment, which ensure_python_readers makes.
ensure_kubernetes_validate() {
    local venv="$TOOLS/python"
    local bin="$venv/bin/kubernetes-validate"
    if [ -x "$bin" ] && [ "$("$bin" --version 2>/dev/null)" = "$KUBERNETES_VALIDATE_VERSION" ]; then
        say "kubernetes-validate: $KUBERNETES_VALIDATE_VERSION at $bin"
    else
        [ -x "$venv/bin/pip" ] || ensure_python_readers
        say "kubernetes-validate: installing $KUBERNETES_VALIDATE_VERSION into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check \
            "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    fi
    export TRIBUTARY_KUBERNETES_VALIDATE="$bin"
}

ensure_packaging_tools() {
    ensure_container_tools
    ensure_promtool
    ensure_kubernetes_validate
}
