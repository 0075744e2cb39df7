# hookbox container image: build with cargo, run as a non-root user on a
# small Debian base. The state directory (database, admin token, backups)
# is a volume; mount it to keep events across container restarts.
#
#   docker build -t hookbox .
#   docker run -d --name hookbox -p 8080:8080 -v hookbox:/var/lib/hookbox \
#     -e GITHUB_WEBHOOK_SECRET=... hookbox
#
# Without a registry that has rust:1-bookworm, build the binary on a
# Debian 12 host and copy it in instead (.dockerignore lets
# target/release/hookbox, and nothing else of target/, through):
#
#   cargo build --release --locked -p hookbox
#   docker build --build-arg HOOKBOX_BINARY=prebuilt -t hookbox .
#
# The admin listener stays on the container's loopback (127.0.0.1:8081)
# and is not published; to reach it, set server.admin_listen =
# "0.0.0.0:8081" in a config and publish it to the host's loopback only:
# -p 127.0.0.1:8081:8081.

# "build" (the default) or "prebuilt": the stage the binary comes from.
ARG HOOKBOX_BINARY=build

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p hookbox \
 && install -m 0755 target/release/hookbox /usr/local/bin/hookbox

# The host's release build, linked against Debian 12's glibc like the
# runtime stage below.
FROM scratch AS prebuilt
COPY target/release/hookbox /usr/local/bin/hookbox

FROM ${HOOKBOX_BINARY} AS binary

FROM debian:bookworm-slim
# ca-certificates: outbound HTTPS (deliveries, GitHub and Stripe APIs).
# Unpinned on purpose: the newest CA bundle of the release is the point.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/hookbox --shell /usr/sbin/nologin hookbox \
 && install -d -m 0700 -o hookbox -g hookbox /var/lib/hookbox
COPY --from=binary /usr/local/bin/hookbox /usr/local/bin/hookbox
USER 10001:10001
ENV STATE_DIRECTORY=/var/lib/hookbox
VOLUME ["/var/lib/hookbox"]
EXPOSE 8080
# SIGTERM (docker stop's default) stops accepting, finishes what is in
# flight and commits; give it longer than docker's default 10 s.
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/hookbox", "healthcheck"]
ENTRYPOINT ["/usr/local/bin/hookbox"]
CMD ["serve"]
