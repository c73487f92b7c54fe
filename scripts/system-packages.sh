#!/usr/bin/env bash
# System packages the deploy tests use: prometheus (prometheus, promtool), podman + runc (containers; Debian's podman
# pulls in crun, which cannot set rlimits in nested containers), the CNI dnsname plugin (compose service names resolve
# between containers), debootstrap (the base image without a registry), nodejs + npm (the Node.js client test and buf),
# stress-ng (the run of the fault tests with every core busy: scripts/under-load.sh).
# Idempotent: installs only what is missing, and only as root with apt-get; otherwise those tests skip (or fail
# under CI=true) naming what is missing.
set -euo pipefail
want=""
for pair in stress-ng:stress-ng prometheus:prometheus promtool:prometheus podman:podman runc:runc debootstrap:debootstrap node:nodejs npm:npm \
    /usr/lib/cni/dnsname:golang-github-containernetworking-plugin-dnsname; do
  tool=${pair%%:*} package=${pair##*:}
  if [ "${tool#/}" != "$tool" ]; then
    present=$([ -e "$tool" ] && echo yes || true)
  else
    present=$(PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null 2>&1 && echo yes || true)
  fi
  if [ -z "$present" ]; then
    case " $want " in *" $package "*) ;; *) want="$want $package" ;; esac
  fi
done
if [ -z "$want" ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing system packages:$want" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $want >/dev/null
else
  echo "not installing system packages (need root and apt-get):$want; the tests that need them will skip" >&2
fi
