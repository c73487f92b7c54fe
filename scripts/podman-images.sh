#!/usr/bin/env bash
# Local stand-ins for the registry images deploy/ builds on, for machines with podman but no image registry.
#   python:3.11-slim   (FROM of deploy/Dockerfile): Debian bookworm by debootstrap: python3 (3.11), venv, useradd
#   prom/prometheus    (deploy/docker-compose.yml): that base plus this machine's prometheus binary
# Each is tagged with the exact name the Dockerfile / compose file uses, so both stay what a Docker user runs.
# Idempotent: an image that exists is kept; the debootstrap root file system is cached as a tarball.
set -euo pipefail
BASE_IMAGE=${BASE_IMAGE:-docker.io/library/python:3.11-slim}
PROMETHEUS_IMAGE=${PROMETHEUS_IMAGE:-docker.io/prom/prometheus:v2.53.1}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${PDSERVE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pdserve-images}
export PATH="$PATH:/usr/sbin:/sbin"
mkdir -p "$CACHE"

if ! podman image exists "$BASE_IMAGE"; then
  tarball="$CACHE/bookworm-python3-passwd.tar"
  if [ ! -s "$tarball" ]; then
    rootfs=$(mktemp -d)
    trap 'rm -rf "$rootfs"' EXIT
    echo "debootstrap: bookworm with python3 (a minute or more)" >&2
    debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates,passwd bookworm "$rootfs" "$MIRROR" >/dev/null
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" -cf "$tarball.part" . && mv "$tarball.part" "$tarball"
    rm -rf "$rootfs"
    trap - EXIT
  fi
  podman import --change 'CMD ["python3"]' --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
    "$tarball" "$BASE_IMAGE" >/dev/null
fi

if ! podman image exists "$PROMETHEUS_IMAGE"; then
  context=$(mktemp -d)
  cp "$(command -v prometheus)" "$context/prometheus"
  cat >"$context/Containerfile" <<CONTAINERFILE
FROM $BASE_IMAGE
COPY prometheus /bin/prometheus
RUN mkdir -p /prometheus /etc/prometheus && chown 65534:65534 /prometheus
USER 65534
EXPOSE 9090
ENTRYPOINT ["/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
CONTAINERFILE
  podman build --pull=never -q -t "$PROMETHEUS_IMAGE" "$context" >/dev/null
  rm -rf "$context"
fi
