#!/usr/bin/env bash
# Install the Debian packages that robustctl's tests and benchmark need, and only those missing.
#
#   openssh-server  sshd for the loopback SSH testbed (tests/integration/testbed.py)
#   openssh-client  ssh, used by pdsh in the benchmark
#   pdsh            the fan-out baseline of `make bench`
#   nftables        network faults on loopback hosts (Testbed.block_host)
#   procps          ps/pkill-free process inspection used when debugging the testbed
#   passwd          useradd/usermod for the testbed's login user
#   slurmctld slurmd slurm-client munge
#                   the real Slurm 22.05 controller and nodes of tests/integration/slurmbed.py
#   chromium chromium-driver
#                   headless Chromium and its WebDriver for the sweep HTML report's browser test
#                   (tests/unit/test_sweep_html_browser.py)
#
# Idempotent: `apt-get update` runs only when something must be installed; prints one line when
# nothing is to do. Needs root (or sudo) only when it has to install. Non-Debian systems: says so and
# exits 0, leaving the tests to skip with their own reason.
set -euo pipefail

PACKAGES=(openssh-server openssh-client pdsh nftables procps passwd slurmctld slurmd slurm-client munge
          chromium chromium-driver)

if ! command -v dpkg-query >/dev/null 2>&1; then
    echo "testbed-deps: not a Debian-like system (no dpkg-query); install ${PACKAGES[*]} by hand" >&2
    exit 0
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "installed" ]]; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "testbed-deps: all present (${PACKAGES[*]})"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -n)
    else
        echo "testbed-deps: missing ${missing[*]} and not root (no sudo): install them by hand" >&2
        exit 1
    fi
fi

echo "testbed-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Do not let package scripts start a system sshd on port 22: the testbed starts its own on loopback.
# A policy-rc.d that we add is removed again; an existing one (e.g. Docker's) is left alone.
added_policy=0
if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee /usr/sbin/policy-rc.d >/dev/null
    "${SUDO[@]}" chmod 755 /usr/sbin/policy-rc.d
    added_policy=1
fi
cleanup() {
    if [[ $added_policy -eq 1 ]]; then
        "${SUDO[@]}" rm -f /usr/sbin/policy-rc.d
    fi
}
trap cleanup EXIT

"${SUDO[@]}" apt-get update -qq
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "testbed-deps: installed ${missing[*]}"
