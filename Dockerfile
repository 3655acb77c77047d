# syntax=docker/dockerfile:1
# capi-lb's image for the forge, multi-arch: ghcr.io/capi-lb/capi-lb:v<version> (the name `capi-lb
# manifests` writes into the Deployment), e.g.
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/capi-lb/capi-lb:v0.1.0 .
# (.github/workflows/release.yaml does this on a tag). The same layout, user and labels as the image
# hack/image.sh builds and tests on a development machine without a registry: the files come from
# `hack/image.sh rootfs` in both. Built for the target on the build machine's own architecture
# (cross-compiled, no emulation): the binary linked against Debian bookworm's glibc of the target
# architecture, plus exactly the libraries and loader it needs, Debian's CA bundle, /etc/passwd and
# /etc/group with nonroot 65532, an empty /tmp, on scratch.

ARG RUST_VERSION=1.95

FROM --platform=$BUILDPLATFORM rust:${RUST_VERSION}-bookworm AS build
ARG TARGETARCH
# The Rust target and Debian multiarch triplet of the target architecture.
RUN case "$TARGETARCH" in \
      amd64) echo x86_64 >/arch ;; \
      arm64) echo aarch64 >/arch ;; \
      *) echo "unsupported architecture $TARGETARCH" >&2; exit 1 ;; \
    esac
# The target's glibc and libgcc (what the image ships, at the paths they have on Debian), a cross
# compiler when the target is not the build machine's architecture, cmake for aws-lc-sys, binutils
# (readelf) for hack/image.sh, and the CA bundle.
RUN set -eux; \
    native="$(dpkg --print-architecture)"; \
    cross=""; \
    if [ "$TARGETARCH" != "$native" ]; then \
      dpkg --add-architecture "$TARGETARCH"; \
      cross="gcc-$(cat /arch)-linux-gnu libc6-dev-$TARGETARCH-cross"; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates binutils cmake \
      "libc6:$TARGETARCH" "libgcc-s1:$TARGETARCH" $cross; \
    rm -rf /var/lib/apt/lists/*; \
    rustup target add "$(cat /arch)-unknown-linux-gnu"
ENV CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
    CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc \
    CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++ \
    AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar \
    CARGO_INCREMENTAL=0
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,id=capi-lb-target-${TARGETARCH},sharing=locked \
    set -eux; \
    target="$(cat /arch)-unknown-linux-gnu"; \
    cargo build --release --locked -p capi-lb --target "$target"; \
    cp "target/$target/release/capi-lb" /capi-lb; \
    hack/image.sh rootfs /capi-lb /rootfs --ca-bundle /etc/ssl/certs/ca-certificates.crt

FROM scratch
ARG VERSION=unknown
ARG REVISION=unknown
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8081/tcp 8443/tcp
LABEL org.opencontainers.image.title="capi-lb" \
      org.opencontainers.image.description="Generic Cluster API load balancers with pluggable infrastructure providers and stable -ext endpoints" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/capi-lb/capi-lb" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${REVISION}"
ENTRYPOINT ["/capi-lb"]
CMD ["run"]
