"""A call that ended without the agent's reply, diagnosed (transport.py's split, by concern):
its exit status and stderr read as ssh could not connect, container absent or stopped, python3
missing, the far side killed by a signal, a reply that is not JSON; each an error of errors.py
that names the hop and says what to do. "No output" is never an answer."""

from __future__ import annotations

import re

from .errors import AgentError, HopFailed, RunwardError, Unreachable
from .exchange import _exchange
from .sshconf import ssh_base
from .targets import Hop, Target


# patterns are compiled on first use (re caches them): most calls never diagnose
_KILLED_PAT = r"runward: the agent was killed by signal (\d+)"


class RawResult:
    __slots__ = ("argv", "returncode", "stdout_lines", "stderr", "duration_s")

    def __init__(self, argv, returncode, stdout_lines, stderr, duration_s):
        self.argv, self.returncode, self.stdout_lines = argv, returncode, stdout_lines
        self.stderr, self.duration_s = stderr, duration_s


_SSH_FAILURES = [
    # OpenSSH's mux client when the master ends before the session opened, then its own
    # direct connect (capped to a keepalive interval, targets/ssh.py) got no answer either
    (r"read from master failed(?s:.*)(?:timed out|No route to host|Network is unreachable)",
     "the ssh link stopped answering: the control connection ended under the call (its keepalive "
     "went unanswered) and a new connection got no answer: link down or host frozen",
     "check the network to the host; the next call tries a full connect again "
     "(RUNWARD_SSH_ALIVE_TIMEOUT / [ssh] alive_timeout set the wait)"),
    (r"Could not resolve hostname", "host name could not be resolved",
     "check the host name, or add it to ~/.ssh/config"),
    (r"Connection refused", "connection refused: nothing listens for ssh there",
     "check the port and that sshd runs on the host"),
    (r"Connection timed out|Operation timed out|timed out during banner exchange|Connection timed out during",
     "connect timeout: the host did not answer",
     "check the address, a VPN or firewall; raise RUNWARD_CONNECT_TIMEOUT for slow links"),
    (r"No route to host|Network is unreachable", "no route to the host", "check the address and the network"),
    (r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED|No \S+ host key is known",
     "host key verification failed", "verify the host's key and add it to known_hosts (ssh once by hand)"),
    (r"Permission denied", "authentication refused (Permission denied)",
     "check the user, the key (ssh-add -l) and authorized_keys on the host"),
    (r"Connection closed by|Connection reset|kex_exchange_identification|Broken pipe",
     "the connection was closed by the remote side", "check sshd's logs on the host; retry"),
]


_CONTAINER_ABSENT = (
    r"(?i)No such container|no such container|does not exist|Configuration file '.*' does not exist|"
    r"unknown container|not found: container")
_CONTAINER_STOPPED = (
    r"(?i)is not running|not running|container state improper|Failed to get init pid|"
    r"cannot exec in a stopped|is paused")
_PYTHON_MISSING = (
    r"(?i)python3?: (command )?not found|python3?: No such file|executable file [`'\"]?python3?[`'\"]? not found|"
    r"exec: \"?python3\"?: executable file not found|Failed to exec \"?python3|"
    r"No such file or directory.*python3|python3.*No such file or directory")


def diagnose(target: Target, raw: RawResult) -> RunwardError:
    rc, err = raw.returncode, raw.stderr.strip()
    last = "\n".join(err.splitlines()[-5:])
    details = {"exit_status": rc, "stderr_tail": last, "argv0": raw.argv[0]}
    ssh_hop = next((h for h in target.hops if h.kind == "ssh"), None)
    killed = re.search(_KILLED_PAT, err)
    if (killed or rc < 0 or 128 < rc < 192) and (stopped := _container_stopped(target)):
        return stopped  # a container stopped under the call kills what runs in it: say that
    if killed:
        where = str(target.hops[-1])
        name = _signame(int(killed.group(1)))
        return HopFailed(f"{where}: the agent was killed by {name} before it answered",
                         "something on the target killed it: the OOM killer (check dmesg), a `pkill -f` "
                         "whose pattern matched it, or a container/session timeout", hop=where, details=details)
    if ssh_hop is not None and rc == 255:
        for pat, what, hint in _SSH_FAILURES:
            if re.search(pat, err):
                return Unreachable(f"{ssh_hop}: {what}", hint, hop=str(ssh_hop), details=details)
    containers = [h for h in target.hops if h.kind != "ssh"]
    if containers and rc != 0:
        hop = containers[0]
        if re.search(_CONTAINER_ABSENT, err) and not re.search(_PYTHON_MISSING, err):
            return HopFailed(f"{hop}: container not found", _container_hint(hop, "absent"), hop=str(hop),
                             details=details)
        if re.search(_CONTAINER_STOPPED, err):
            return HopFailed(f"{hop}: container is not running", _container_hint(hop, "stopped"), hop=str(hop),
                             details=details)
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", err)
    if missing and rc == 1:
        # the bootstrap's own imports (the agent answers this itself once it runs): the
        # target's state, said once, with no traceback
        where = str(target.hops[-1]) if target.hops else "local"
        return HopFailed(f"{where}: python3 on the target lacks the standard module {missing.group(1)!r}",
                         "install the whole standard library there: apt-get install -y python3 "
                         "(Debian/Ubuntu; other systems: their python3 package)", hop=where,
                         details={"exit_status": rc, "module": missing.group(1), "argv0": raw.argv[0]})
    if rc in (126, 127) or re.search(_PYTHON_MISSING, err):
        hop = target.hops[-1] if target.hops else None
        where = str(hop) if hop else "local"
        if re.search(_PYTHON_MISSING, err) or rc == 127:
            return HopFailed(f"{where}: python3 not found on the target", 
                             "install python3 (>= 3.8) where the job runs: e.g. apt-get install -y python3-minimal",
                             hop=where, details=details)
    if ssh_hop is not None and rc == 255:
        # no known ssh message and no container message: the channel itself ended badly
        if not last and ssh_hop is target.hops[0] and (silent := link_stopped(ssh_hop, details)):
            return silent  # its master ended on its keepalive under the call (a follow mid-stream)
        if not raw.stdout_lines and not last:
            return HopFailed(f"{ssh_hop}: ssh ended with 255 and no message: the connection dropped, or the "
                             "remote side was killed by a signal", "retry; check the host's sshd log and dmesg",
                             hop=str(ssh_hop), details=details)
        if not raw.stdout_lines:
            return Unreachable(f"{ssh_hop}: ssh failed (exit 255): {last or 'no message'}",
                               "run `runward doctor --on ...` or ssh -v by hand", hop=str(ssh_hop),
                               details=details)
    if rc < 0 or 128 < rc < 192:
        signum = -rc if rc < 0 else rc - 128
        name = _signame(signum)
        who = ("the agent" if target.is_local else "the local ssh/hop process") if rc < 0 else "the far side"
        return HopFailed(f"{who} was killed by {name} before the agent answered (exit {rc})",
                         "something on the target killed the agent (OOM killer? a pkill -f matching it?); "
                         "check dmesg on the target", hop=str(target.hops[-1]) if target.hops else "local",
                         details=details)
    if raw.stdout_lines:
        first = b"".join(raw.stdout_lines)[:200]
        return AgentError(f"the reply was not the agent's JSON; it began with {first!r}",
                          "a login script on the target prints to stdout (e.g. an echo in .bashrc); "
                          "make it quiet for non-interactive shells", hop=str(target.hops[-1]) if target.hops else "local",
                          details=details)
    # the message has stderr's last line; details (shown below it) the last five
    return AgentError(f"the agent gave no reply (exit status {rc}){': ' + last.splitlines()[-1] if last else ''}",
                      "run `runward doctor` on this target", hop=str(target.hops[-1]) if target.hops else "local",
                      details=details)


def link_stopped(hop: Hop, details: dict | None = None) -> Unreachable | None:
    """The call through HOP (the first, an ssh hop) ended with no reply and no message: if the
    control master that carried it is gone too, it ended on its keepalive, the link silent.
    Said as status says it, Unreachable; None where the master still answers (or none can be
    asked)."""
    from .sshconf import ssh_alive_options
    try:
        rc = _exchange(hop.ssh_argv(ssh_base(), ["-O", "check"]), b"", None, None, 10)[0]
    except (RunwardError, OSError):
        return None
    if rc == 0:
        return None
    every = int(ssh_alive_options()[1].split("=")[1])
    return Unreachable(f"{hop}: the ssh link stopped answering (silent for {every} s, then 3 "
                       f"keepalives {every} s apart went unanswered): link down or host frozen",
                       "check the network to the host; runward status tries again with a new "
                       "connection (RUNWARD_SSH_ALIVE_TIMEOUT / [ssh] alive_timeout set the wait)",
                       hop=str(hop), details=details)


def _container_stopped(target: Target) -> RunwardError | None:
    """After a call through a container was killed by a signal: is the container itself
    still there and running? One `true` through the same hops (only on this failure path);
    the container's stop is the cause then, not the OOM killer or a pkill."""
    if not any(h.kind != "ssh" for h in target.hops):
        return None
    try:
        probe = _exchange(target.wrap(["true"], ssh_base()), b"", None, None, 20)
    except (RunwardError, OSError):
        return None
    rc, err = probe[0], probe[3]
    if rc == 0:
        return None
    hop = next(h for h in target.hops if h.kind != "ssh")
    if re.search(_CONTAINER_ABSENT, err) and not re.search(_PYTHON_MISSING, err):
        return HopFailed(f"{hop}: the container was removed while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "absent"), hop=str(hop), details={"stderr_tail": err[-500:]})
    if re.search(_CONTAINER_STOPPED, err):
        return HopFailed(f"{hop}: the container stopped while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "stopped"), hop=str(hop), details={"stderr_tail": err[-500:]})
    return None


def _container_hint(hop: Hop, what: str) -> str:
    cmds = {"docker": f"docker ps -a | grep {hop.name}; docker start {hop.name}",
            "podman": f"podman ps -a | grep {hop.name}; podman start {hop.name}",
            "lxc": f"lxc-info -n {hop.name}; lxc-start -n {hop.name}",
            "pct": f"pct status {hop.name}; pct start {hop.name}"}
    return ("check the container name/id and that it is running: " if what == "absent"
            else "start it first: ") + cmds.get(hop.kind, "")


def _signame(num: int) -> str:
    import signal
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
