"""The ssh hop: `ssh://[user@]host[:port]`, the only hop that turns an argv into a string.

The remote user's login shell reads the command line sshd hands it, so every word is quoted
once here with POSIX rules (quote_argv); nobody writes nested quotes by hand."""

from __future__ import annotations

import os
import re

KIND = "ssh"
HOST_PAT = r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>\d{1,5}))?$"


# How ssh's failures read (transport/diagnosis.py asks the hop on an exit 255): a pattern of its stderr,
# what it means, what to do. The first that matches says it.
FAILURES = [
    # OpenSSH's mux client when the master ends before the session opened, then its own
    # direct connect (capped to a keepalive interval, _fallback_connect) got no answer either
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

# how ssh's own lines begin (its client, its mux client, its link): an exit 255 with only
# these, or none, is ssh's to say
LINE = (r"\s*(?:ssh: |ssh_|client_loop|Connection to \S+ closed|Shared connection to|mux_client|muxclient|"
        r"Control ?[Ss]ocket|kex_|Warning: Permanently|Timeout, server|Received disconnect|Disconnected from|"
        r"Load key|Bad owner|channel \d+:|packet_write|Read from remote host)")


def parse(hostpart: str) -> tuple[str, str | None, int | None] | None:
    """(host, user, port) of `[user@]host[:port]`, or None where it is not one."""
    m = re.match(HOST_PAT, hostpart)
    if not m:
        return None
    return m["host"].strip("[]"), m["user"], int(m["port"]) if m["port"] else None


def argv(hop, base: list[str], options: list[str], remote: str | None = None) -> list[str]:
    """ssh to this hop: base, its port, options, the destination, and the remote command
    line (none for a request to the control master, `-O ...`)."""
    port = ["-p", str(hop.port)] if hop.port else []
    dest = f"{hop.user}@{hop.name}" if hop.user else hop.name
    base = _own_master(base, dest, hop.port, _proxy(hop) if any(w.startswith("ControlPath=") for w in base) else "")
    interval = next((int(w.split("=", 1)[1]) for w in base if w.startswith("ServerAliveInterval=")), 0)
    if interval and _config_is_stricter(base, dest, hop.port):
        base = _without_alive(base)
    if interval:
        base = _fallback_connect(base, interval)
    return [*base, *port, *options, "--", dest, *([remote] if remote is not None else [])]


def _fallback_connect(base: list[str], interval: int) -> list[str]:
    """BASE with ConnectTimeout cut to one keepalive interval while this destination's
    control master is up. A call then goes through the master and never connects, except
    in one case: the master ends before the call's session opened (its keepalive found the
    link silent), and OpenSSH's mux client falls back to a direct connect on that same dead
    link, which waited the whole connect timeout more (25 s in all by default, measured).
    With the cap the call ends within the alive timeout (transport.ssh_alive_options). A
    master that ended for another reason (ControlPersist expiring at that moment, killed)
    leaves a healthy link that connects well within an interval; a socket file left by a
    killed master is unlinked by that same connect, so only one call pays the cap."""
    path = next((w[len("ControlPath="):] for w in base if w.startswith("ControlPath=")), "")
    folder, _, name = path.rpartition("/")
    if not name.endswith("-%C"):  # not a socket named by _own_master: its master is not findable
        return base
    try:
        up = any(f.startswith(name[:-2]) for f in os.listdir(folder))
    except OSError:
        return base
    if not up:
        return base
    out = []
    for w in base:
        if w.startswith("ConnectTimeout=") and int(w.split("=", 1)[1]) > interval:
            w = f"ConnectTimeout={interval}"
        out.append(w)
    return out


def _without_alive(base: list[str]) -> list[str]:
    out: list[str] = []
    for w in base:
        if w.startswith(("ServerAliveInterval=", "ServerAliveCountMax=")) and out and out[-1] == "-o":
            out.pop()
        else:
            out.append(w)
    return out


_STRICTER: dict = {}  # (base, dest, port) -> the answer, once per process (a call builds several argvs)


def _config_is_stricter(base: list[str], dest: str, port: int | None) -> bool:
    key = (tuple(base), dest, port)
    if key not in _STRICTER:
        _STRICTER[key] = _ask_stricter(base, dest, port)
    return _STRICTER[key]


def _ask_stricter(base: list[str], dest: str, port: int | None) -> bool:
    """Does the user's own ssh config find a silent link sooner than runward's keepalive for
    this destination? Asked of `ssh -G` (what ssh itself resolves) only where a config file
    mentions ServerAlive at all: most never do, and they pay no extra process."""
    cfg = base[base.index("-F") + 1] if "-F" in base else None
    if not _mentions_alive(cfg):
        return False
    import subprocess
    ours = dict(w.split("=", 1) for w in base if w.startswith(("ServerAliveInterval=", "ServerAliveCountMax=")))
    argv = ["ssh", "-G", *(["-F", cfg] if cfg else []), *(["-p", str(port)] if port else []), "--", dest]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    got = dict(line.split(" ", 1) for line in out.splitlines() if line.startswith("serveralive"))
    try:
        theirs = int(got.get("serveraliveinterval", "0")) * int(got.get("serveralivecountmax", "3"))
    except ValueError:
        return False
    return 0 < theirs < int(ours["ServerAliveInterval"]) * int(ours["ServerAliveCountMax"])


def _mentions_alive(cfg: str | None) -> bool:
    """Whether any config file ssh reads (its Includes too, a few levels) says ServerAlive."""
    import glob
    import pwd
    home = pwd.getpwuid(os.getuid()).pw_dir  # OpenSSH reads ~/.ssh from passwd, not $HOME
    todo = [(cfg, os.path.dirname(cfg))] if cfg else [
        (os.path.join(home, ".ssh", "config"), os.path.join(home, ".ssh")), ("/etc/ssh/ssh_config", "/etc/ssh")]
    seen = 0
    while todo and seen < 32:
        path, rel = todo.pop()
        seen += 1
        try:
            with open(path, errors="replace") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        for line in text.splitlines():
            words = line.strip().replace("=", " ").split()
            if words and words[0].lower().startswith("serveralive"):
                return True
            if words and words[0].lower() == "include":
                for pat in words[1:]:
                    pat = os.path.join(rel, os.path.expanduser(pat))
                    todo += [(m, rel) for m in sorted(glob.glob(pat))]
    return False


def _proxy(hop) -> str:
    """The proxy (ProxyJump / ProxyCommand) ssh resolves hop to now, "" for none or where ssh
    cannot say (targets/sshresolve.py keeps the answer while the config files stay as they are)."""
    from .sshresolve import resolved
    said = resolved(hop) or ""
    return said.partition(" ")[2]


def _own_master(base: list[str], dest: str, port: int | None, proxy: str = "") -> list[str]:
    """BASE with its control socket made this destination's own: `<dir>/<tag>-%C`, TAG a
    crc32 of the destination as written (alias, user, port), the ssh config in use and the
    proxy ssh resolves it through now. OpenSSH's %C alone hashes the host, port and user it
    resolved, so another alias of the same host (another key, another ProxyJump) would ride
    the first one's open master and never meet its own failure (a key the host refuses
    would work while the master lives); and an alias re-pointed through another ProxyJump or
    ProxyCommand (another bastion, to another cluster's same private address) keeps its %C,
    so without the proxy in the tag its calls would ride the open master to the machine it
    named before (design rule 14)."""
    import binascii
    out = []
    for word in base:
        if word.startswith("ControlPath=") and word.endswith("/%C"):
            key = "\0".join((os.environ.get("RUNWARD_SSH_CONFIG", ""), dest, str(port or ""))).encode()
            if proxy:  # without a proxy the tag is the proxy-less one: a master an older runward started stays found
                key += b"\0" + proxy.encode()
            word = "%s%08x-%%C" % (word[:-2], binascii.crc32(key))
        out.append(word)
    return out


# The remote shell's first words for a tagged hop (model.Target.wrap): its pid and start
# time (field 22 of /proc/PID/stat, read with the shell's own `read`: no process spawned) on
# stderr, then exec of the command, which keeps both; it leads its session and group (sshd's
# setsid), so the group ends with everything it started.
TAG = 'read -r s </proc/$$/stat;set -- ${s##*) };echo "runward-hop $$ ${20}" >&2;exec '
TAG_WORD = "runward-hop"


def wrap(hop, inner: list[str], ssh_base: list[str] | None = None, tagged: bool = False) -> list[str]:
    return argv(hop, ssh_base or ["ssh"], [], (TAG if tagged else "") + quote_argv(inner))


def quote_argv(words: list[str]) -> str:
    """One string the remote POSIX shell splits back into exactly `words`."""
    import shlex
    return " ".join(shlex.quote(a) for a in words)
