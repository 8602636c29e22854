#!/usr/bin/env bash
# Installs the Debian packages the end-to-end tests run for real: Prometheus,
# Alertmanager, Chromium (headless screenshots of the HTML reports) and HAProxy (the
# data plane the HAProxy fleet drives). Idempotent and quiet: when every binary is present it does nothing
# (no apt-get update, no network), so `make test` can call it every time.
set -euo pipefail

# binary -> Debian package
declare -A PACKAGES=(
  [/usr/bin/prometheus]=prometheus
  # promtool check metrics / test rules (tests/metrics)
  [/usr/bin/promtool]=prometheus
  [/usr/bin/prometheus-alertmanager]=prometheus-alertmanager
  [/usr/bin/chromium]=chromium
  [/usr/sbin/haproxy]=haproxy
)

missing=()
for binary in "${!PACKAGES[@]}"; do
  [[ -x "$binary" ]] || missing+=("${PACKAGES[$binary]}")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-system-deps: apt-get not found; install ${missing[*]} with your package manager" >&2
  exit 1
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  else
    echo "install-system-deps: need root (or sudo) to install ${missing[*]}" >&2
    exit 1
  fi
fi

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The packages' postinst would start system services; policy-rc.d exit 101 keeps
# them stopped (tests start their own instances on free ports).
policy=/usr/sbin/policy-rc.d
own_policy=0
if [[ ! -e $policy ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$policy" >/dev/null
  "${SUDO[@]}" chmod +x "$policy"
  own_policy=1
fi
cleanup() {
  rm -f "$log"
  if [[ $own_policy -eq 1 ]]; then "${SUDO[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
if ! "${SUDO[@]}" apt-get update -qq >"$log" 2>&1 ||
  ! "${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >>"$log" 2>&1; then
  echo "install-system-deps: installing ${missing[*]} failed:" >&2
  tail -n 20 "$log" >&2
  exit 1
fi

for binary in "${!PACKAGES[@]}"; do
  if [[ ! -x "$binary" ]]; then
    echo "install-system-deps: $binary still missing after installing ${PACKAGES[$binary]}" >&2
    exit 1
  fi
done
echo "install-system-deps: installed ${missing[*]}"
