"""Find the real test hosts and containers that `scripts/testbed up` brought up.

    import testbed
    tb = testbed.require("ssh")            # skips the test (with a reason) when absent
    subprocess.run(testbed.ssh_argv("rw1", "true"), env=testbed.env())

`load()` reads $RUNWARD_TESTBED/testbed.json (default /tmp/runward-testbed) and returns it as a
dict, or None when the testbed is not up (no file, or a file left from before a reboot).
Stdlib only; pytest is imported only by `require`. See docs/testbed.md for the schema.
"""

from __future__ import annotations

import json
import os
import re
import socket
from pathlib import Path

DEFAULT_DIR = "/tmp/runward-testbed"
NOT_UP = "needs root and `scripts/testbed up`: no ssh test hosts"

# feature -> the testbed.json key that must be present and non-empty
FEATURES = {
    "ssh": "hosts",
    "slow": "slow_hosts",
    "podman": "podman",
    "podman_stopped": "podman_stopped",
    "podman_nopy": "podman_nopy",
    "docker": "podman",          # bin/docker is podman, as Debian's podman-docker makes it
    "lxc": "lxc",
    "lxc_stopped": "lxc_stopped",
    "pct": "pct_ids",
    "unreachable": "unreachable_host",
    "timeout": "timeout_host",
    "badkey": "badkey_host",
    "badhostkey": "badhostkey_host",
    "nofwd": "nofwd_host",
}


def directory() -> str:
    return os.environ.get("RUNWARD_TESTBED") or DEFAULT_DIR


def _why_not() -> tuple[dict | None, str]:
    path = os.path.join(directory(), "testbed.json")
    try:
        with open(path) as f:
            tb = json.load(f)
    except FileNotFoundError:
        return None, NOT_UP
    except (OSError, ValueError) as e:
        return None, "%s (unreadable %s: %s)" % (NOT_UP, path, e)
    # /run is a tmpfs: after a reboot the namespaces are gone but /tmp/... may remain
    first = (tb.get("hosts") or ["rw1"])[0]
    if not os.path.exists("/run/netns/runward-" + first):
        return None, "%s (%s is stale: namespace runward-%s is gone; rerun it)" % (NOT_UP, path, first)
    key = tb.get("client_key")
    if key and not os.access(key, os.R_OK):
        return None, "%s (cannot read the client key %s: not root?)" % (NOT_UP, key)
    return tb, ""


def load() -> dict | None:
    """testbed.json as a dict, or None when the testbed is not up."""
    return _why_not()[0]


def require(feature: str = "ssh") -> dict:
    """Return the testbed, or pytest.skip with a clear reason when `feature` is unavailable.

    Features: ssh, slow, podman, podman_stopped, podman_nopy, docker, lxc, lxc_stopped, pct,
    unreachable, timeout, badkey, badhostkey, nofwd.
    """
    import pytest

    if feature not in FEATURES:
        raise ValueError("unknown testbed feature %r (known: %s)" % (feature, ", ".join(FEATURES)))
    tb, why = _why_not()
    if tb is None:
        pytest.skip(why)
    if os.geteuid() != 0:
        pytest.skip("%s (not root)" % NOT_UP)
    if not tb.get(FEATURES[feature]):
        pytest.skip("the testbed has no %s (testbed.json key %r); rerun `scripts/testbed up`"
                    % (feature, FEATURES[feature]))
    return tb


def env(tb: dict | None = None, base: dict | None = None) -> dict:
    """An environment for subprocesses: the testbed's bin/ (pct, podman, docker, lxc-*) first
    on PATH, and podman's configuration, on top of `base` (default os.environ)."""
    tb = tb if tb is not None else load()
    out = dict(os.environ if base is None else base)
    if tb:
        extra = tb.get("env", {})
        out["PATH"] = extra.get("PATH_PREPEND", tb["bin"]) + os.pathsep + out.get("PATH", os.defpath)
        for k, v in extra.items():
            if k != "PATH_PREPEND":
                out[k] = v
    return out


def ssh_argv(host: str, *remote: str, tb: dict | None = None) -> list[str]:
    """argv for the system ssh client to `host` through the testbed's ssh_config. The remote
    words are joined by ssh and read by the remote shell: quote them yourself."""
    tb = tb if tb is not None else load()
    if not tb:
        raise RuntimeError(NOT_UP)
    return ["ssh", "-F", tb["ssh_config"], host, *remote]


def unreachable_slurm_conf(sb: dict, tmp_path: Path) -> Path:
    """A copy of the testbed's slurm.conf whose controller port nobody listens on: the real
    squeue and scontrol fail as they do when slurmctld is down ("slurm_load_jobs error:
    Unable to contact slurm controller (connect failure)", exit 1), within a second
    (MessageTimeout=1), and the shared slurmctld is never touched."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # free, and nothing listens on it
    text = Path(sb["conf"]).read_text()
    text = "\n".join(ln for ln in text.splitlines() if not re.match(r"(?i)(SlurmctldPort|MessageTimeout)=", ln))
    conf = tmp_path / "unreachable-slurm.conf"
    conf.write_text(text + f"\nSlurmctldPort={port}\nMessageTimeout=1\n")
    return conf
