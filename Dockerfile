# syntax=docker/dockerfile:1
# nudge's container image: built with the Rust toolchain on Debian bookworm,
# run on distroless/cc (glibc, CA certificates, no shell), as uid 65532, with a
# read-only root filesystem (nudge writes nothing to disk).
#
#   docker build -t nudge:0.1.0 .

FROM rust:1.95-bookworm AS builder
WORKDIR /src
# The whole build context (.dockerignore leaves out only what no build reads):
# cargo loads every workspace member's manifest (apiserver-double,
# examples/embedder) before it builds anything, and the crate may include
# files from anywhere in the repository (docs pages into its rustdoc). A list
# of directories here broke each time one was added. scripts/docker-context-check
# builds from exactly this context in CI.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin nudge \
    && install -D -m 0755 target/release/nudge /out/nudge

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /out/nudge /usr/local/bin/nudge
# distroless "nonroot": uid/gid 65532, matching the manifests' securityContext.
USER 65532:65532
EXPOSE 9090 8443
ENTRYPOINT ["/usr/local/bin/nudge"]
CMD ["run"]
