"""How this machine runs ssh and every child the CLI starts: the ssh client's base argv
(batch mode, multiplexed through a 0700 control directory of our own), its keepalive bound,
and the environment children get (secrets sent in a request are kept out of it). Beside the
ssh hop, which reads these options per destination (ssh.py); below transport/, which runs
them, and spec/, whose `--env NAME` names the secrets kept out."""

from __future__ import annotations

import os

from ..cache import local_home, make_private_dir, read_cache, write_cache
from ..errors import BadInput


def ssh_base(connect_timeout: float | None = None) -> list[str]:
    """The system OpenSSH client (so ~/.ssh/config, agents and ProxyJump work) in batch
    mode, multiplexed through a control socket in a 0700 directory of runward's own."""
    sockdir = control_dir()
    timeout = connect_timeout or float(os.environ.get("RUNWARD_CONNECT_TIMEOUT", "10"))
    base = ["ssh", "-T",
            "-o", "BatchMode=yes",
            "-o", f"ConnectTimeout={int(max(1, timeout))}",
            "-o", "ControlMaster=auto",
            "-o", f"ControlPath={sockdir}/%C",
            "-o", f"ControlPersist={os.environ.get('RUNWARD_CONTROL_PERSIST', '300')}",
            *ssh_alive_options(),
            "-o", "LogLevel=ERROR"]
    cfg = os.environ.get("RUNWARD_SSH_CONFIG")
    if cfg:
        base[1:1] = ["-F", os.path.abspath(cfg)]  # ssh runs from / (spawn.py: _from_root)
    return base


def ssh_alive_options() -> list[str]:
    """A link that went silent (cable, VPN, a host frozen) is found within the alive timeout
    (RUNWARD_SSH_ALIVE_TIMEOUT, runward.toml's [ssh] alive_timeout; default 15 s) by the ssh
    keepalive: ssh probes after an interval of silence and gives up when three more went
    unanswered, so at 4 intervals. The control master started with these options carries
    every later call, so this bounds a call on a dead link too (before: 15 s x 3 + TCP's own
    retries, ~70 s). The fifth interval is the connect that ssh's own mux client tries when
    its master ends under it (targets/ssh.py caps ConnectTimeout to one interval while a
    master is up), so T = 5 intervals bounds every call. targets/ssh.py drops these options
    for a destination whose own ssh config is stricter."""
    interval = max(1, round(max(3.0, alive_timeout()) / 5))
    return ["-o", f"ServerAliveInterval={interval}", "-o", "ServerAliveCountMax=3"]


def alive_timeout() -> float:
    """The seconds of silence after which a link counts as down (RUNWARD_SSH_ALIVE_TIMEOUT,
    runward.toml's [ssh] alive_timeout; default 15): ssh's keepalive ends the call here, and
    a follower's far side ends after as long without the call's heartbeat (transport/agentcall.py)."""
    try:
        return float(os.environ.get("RUNWARD_SSH_ALIVE_TIMEOUT") or 15)
    except ValueError:
        return 15.0


def control_dir() -> str:
    """A 0700 directory of our own for ssh control sockets. A unix socket path must fit in
    108 bytes, and a socket's name is 9 (the destination's tag, targets/ssh.py) + 40 (%C)
    plus ssh's temporary suffix of 17, so a long home falls back to a short directory that
    no other user can name first (_short_control_dir)."""
    home = local_home()
    d = os.path.join(home, "ssh")
    if len(d) > 39:
        d = _short_control_dir(home)
    try:
        make_private_dir(d)
    except OSError as e:
        raise BadInput(f"cannot create the ssh control directory {d}: {e.strerror}", "check RUNWARD_HOME")
    if not _private(d):
        raise BadInput(f"ssh control directory {d} is not ours or is open to others",
                       f"remove it (rm -r {d}) and retry; runward recreates it with mode 0700")
    return d


def _private(d: str) -> bool:
    """d is a directory (not a link to one) of ours that nobody else may enter."""
    try:
        st = os.lstat(d)
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077 and st.st_mode & 0o170000 == 0o040000


def _short_control_dir(home: str) -> str:
    """The control directory of a home too long for sockets. A name under /tmp that anyone can
    compute can be made first by another user, and then every ssh call of ours is refused
    (exit 2) with a directory we cannot remove. So: under $XDG_RUNTIME_DIR where it is ours
    and 0700 (nobody else can create there), else a directory of a random name made under
    /tmp by us, its path recorded in the home (<home>/ssh-dir) for the next calls, and made
    anew when what is recorded is gone or not ours (a reboot, a tmp cleaner)."""
    import hashlib
    tag = hashlib.sha1(home.encode()).hexdigest()[:10]
    xdg = os.environ.get("XDG_RUNTIME_DIR") or ""
    if xdg.startswith("/") and len(xdg) + 19 <= 39 and _private(xdg):
        return os.path.join(xdg, f"runward-{tag}")
    record = os.path.join(home, "ssh-dir")
    known = (read_cache(record) or b"").decode("utf-8", "replace")
    if known.startswith("/tmp/runward-") and len(known) <= 39 and _private(known):
        return known
    while True:
        d = f"/tmp/runward-{os.urandom(6).hex()}"
        try:
            os.mkdir(d, 0o700)
            break
        except FileExistsError:
            continue
        except OSError as e:
            raise BadInput(f"cannot create the ssh control directory {d}: {e.strerror}",
                           "check that /tmp is writable, or set a short RUNWARD_HOME")
    write_cache(record, d.encode())
    return d


# Names whose values this process sends in a request (`--env NAME` took them from our own
# environment): kept out of every child we start, so neither the local agent nor an ssh
# ControlMaster (which outlives the call by ControlPersist) carries a second copy.
HIDDEN_ENV: set[str] = set()


def child_environ() -> dict:
    if not HIDDEN_ENV:
        return os.environ
    return {k: v for k, v in os.environ.items() if k not in HIDDEN_ENV}
