# syntax=docker/dockerfile:1
#
# The tributary image: the command, the bundled transform plugins, and nothing else that runs.
#
#   docker build -t tributary .
#   docker run --rm -v ./pipeline.toml:/etc/tributary/pipeline.toml:ro tributary
#
# Two stages: the build stage compiles the command (release) and the bundled plugins
# (wasm32-wasip2); the runtime stage is a distroless base (glibc, CA certificates, a non-root
# user, no shell and no package manager) with what the build made copied in. The stage names
# `build` and `runtime` and the /out layout are what the tests rely on (tests/e2e/packaging.rs
# builds the runtime stage from a binary built outside a container).

ARG RUST_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${RUST_IMAGE} AS build
# busybox-static only for its wget: the HEALTHCHECK's HTTP client (see below).
RUN apt-get update \
 && apt-get install -y --no-install-recommends busybox-static \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add wasm32-wasip2
WORKDIR /src
COPY . .
# The plugins worth bundling; the others under plugins/ exist for the tests (trap, spin,
# sandbox, old-contract, newer-functions).
ARG PLUGINS="passthrough mask select filter router flatten messages"
# Line tables stay out of the image (70 MB instead of 320); the symbol names stay, so a
# backtrace still names its functions.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    cargo build --locked --release -p tributary-cli; \
    cargo build --locked --release --target wasm32-wasip2 $(printf -- '-p %s ' $PLUGINS); \
    mkdir -p /out/plugins /out/cache/tributary/plugins; \
    objcopy --strip-debug target/release/tributary /out/tributary; \
    for plugin in $PLUGINS; do cp "target/wasm32-wasip2/release/$plugin.wasm" /out/plugins/; done; \
    cp /bin/busybox /out/wget

FROM ${RUNTIME_IMAGE} AS runtime
COPY --from=build /out/tributary /usr/local/bin/tributary
COPY --from=build /out/plugins/ /usr/share/tributary/plugins/
COPY --from=build /out/wget /usr/local/libexec/tributary/wget
# Compiled plugins are kept across starts (a Python plugin takes tens of seconds to compile)
# in a volume, bounded by TRIBUTARY_PLUGIN_CACHE_MIB. The directory is created owned by the
# runtime user so that a fresh volume mounted there starts out writable by it.
COPY --from=build --chown=65532:65532 /out/cache/ /var/cache/
ENV TRIBUTARY_PLUGIN_CACHE=/var/cache/tributary/plugins \
    TRIBUTARY_PLUGIN_CACHE_MIB=1024
VOLUME ["/var/cache/tributary"]
# distroless's "nonroot" user, by number so that runAsNonRoot can verify it.
USER 65532:65532
# The metrics, /healthz and /readyz, when the pipeline file sets metrics.listen to this port:
#   [metrics]
#   listen = "0.0.0.0:9187"
EXPOSE 9187
# The image has no shell and no curl, so the check is an exec-form command: busybox's wget
# (static, one file, installed under a name that runs only wget), which exits non-zero on a
# refused connection or any status but 2xx. The address is fixed here, since exec form expands
# no variables: a pipeline listening elsewhere needs its own HEALTHCHECK (or none; Kubernetes
# ignores this one and uses the manifest's probes).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/usr/local/libexec/tributary/wget", "-q", "-O", "/dev/null", "http://127.0.0.1:9187/healthz"]
# SIGTERM stops a pipeline cleanly: the flush in flight lands, is confirmed, and it exits.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tributary"]
CMD ["run", "--wait", "--config", "/etc/tributary/pipeline.toml"]
