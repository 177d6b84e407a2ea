# Hayate in a container: a multi-stage build, a small Debian runtime image, a non-root user.
#   docker build -t hayate .
#   docker run -p 1883:1883 -p 9090:9090 -e HAYATE_HTTP_TOKEN=change-me hayate
# The image's entry point serves MQTT on 0.0.0.0:1883 and the HTTP edge (metrics, admin API,
# dashboard) on 0.0.0.0:9090, with the store in the /var/lib/hayate volume. Orchestrators probe
# GET /health (liveness) and GET /ready (readiness) on port 9090; they need no token.

# The newest stable Rust 1.x (the workspace needs 1.90 or later).
FROM rust:1-bookworm AS build
WORKDIR /src
# libssl-dev: TLS-PSK listeners (OpenSSL). Versions are the release's own (a pin breaks on the
# next Debian point release).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cargo build --release --locked -p hayate \
    && install -m 0755 target/release/hayate /usr/local/bin/hayate

FROM debian:bookworm-slim
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /var/lib/hayate --create-home hayate
COPY --from=build /usr/local/bin/hayate /usr/local/bin/hayate
USER 10001:10001
VOLUME ["/var/lib/hayate"]
EXPOSE 1883 9090
ENTRYPOINT ["/usr/local/bin/hayate", "serve", "--listen", "0.0.0.0:1883", "--http", "0.0.0.0:9090", "--data-dir", "/var/lib/hayate"]
