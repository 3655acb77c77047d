# capi-lb: a static binary in a distroless, non-root image.
#   docker build -t ghcr.io/<org>/capi-lb:v0.1.0 .
# (No image can be built on the project's development machines; CI builds the binary only.)

FROM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends musl-tools && rm -rf /var/lib/apt/lists/*
RUN rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl -p capi-lb \
 && cp target/x86_64-unknown-linux-musl/release/capi-lb /capi-lb

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /capi-lb /capi-lb
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/capi-lb"]
CMD ["run"]
