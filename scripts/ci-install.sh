#!/usr/bin/env bash
# Install the system packages runward's real-target tests need, on a fresh
# Debian 12 machine, as root. Idempotent: a second run only re-checks.
#
# Python test deps (pytest, hypothesis) are installed elsewhere; this script
# does no pip.
#
# Usage: scripts/ci-install.sh        (then: scripts/testbed up)
set -euo pipefail

log() { printf 'ci-install: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and creates network namespaces)"
[ -r /etc/debian_version ] || die "expected a Debian machine (no /etc/debian_version)"

# openssh-server/-client: the test hosts and the client runward drives.
# iproute2: network namespaces and veth pairs.
# podman + runc: a docker-exec-compatible container runtime (crun fails on
#   cgroups-v1 hybrid hosts, so runc is the runtime we configure).
# debootstrap: the minimal Debian rootfs both container kinds are made from.
# lxc: what Proxmox's `pct exec` wraps; our `pct` stand-in forwards to it.
# catatonit: the init podman's `--init` injects (a Recommends of podman,
#   which --no-install-recommends would otherwise skip).
# procps, psmisc: ps/pgrep/pkill/fuser, used by tests and by the testbed.
# python3: the testbed script and its latency relay are stdlib python3.
# python3-venv: .ci/run and scripts/test make a venv; Debian's python3 has no ensurepip
#   without it ("ensurepip is not available").
# ca-certificates: debootstrap fetches over the Debian mirror.
# zsh: tests/test_completion.py loads `runward completion zsh` into a real zsh (~1 MB).
# tmux: tests/test_top.py drives `runward top` in a real terminal (send-keys, capture-pane).
# rsync: bench/deploy.py's peer (the test hosts share this filesystem, so its binary).
# slurm-wlm, munge: a single-node Slurm (scripts/slurm-testbed) for tests/test_slurm.py; no
#   slurmdbd/mariadb: CI has no accounting, runward reads states from scontrol (docs/slurm.md).
PKGS=(
  openssh-server openssh-client iproute2
  podman runc catatonit debootstrap lxc
  procps psmisc python3 python3-venv ca-certificates zsh tmux rsync
  slurm-wlm munge
)

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

export DEBIAN_FRONTEND=noninteractive
if [ "${#missing[@]}" -gt 0 ]; then
  # Keep package scripts from starting daemons (the system sshd on :22, lxc-net's lxcbr0
  # bridge with dnsmasq and NAT rules): the testbed starts only what it needs, by pid.
  # A policy-rc.d that exits 101 is Debian's switch for that; ours is removed afterwards.
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\n# ci-install.sh: no daemons started by package scripts\nexit 101\n' \
      > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  fi
  log "installing: ${missing[*]}"
  apt-get update -qq
  # --no-install-recommends keeps podman from pulling in slirp/netavark
  # extras and lxc from pulling in templates we never use.
  apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" >/dev/null
else
  log "all packages already installed"
fi

# Installing openssh-server on a machine without systemd may try to start the
# system sshd through the init script; the testbed runs its own sshd
# processes in network namespaces and does not need (or touch) that one.
mkdir -p /run/sshd   # privilege-separation dir; sshd refuses to start without it

# Fail loudly now if something the testbed needs is still not there.
for cmd in sshd ssh ssh-keygen ip podman runc debootstrap lxc-start lxc-attach \
           lxc-stop lxc-info ps pgrep fuser python3 slurmctld slurmd sbatch munged; do
  if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ]; then
    die "'$cmd' not found after install"
  fi
done
log "ok ($(podman --version), $(runc --version | head -n1), lxc $(lxc-start --version))"
