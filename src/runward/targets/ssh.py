"""The ssh hop: `ssh://[user@]host[:port]`, the only hop that turns an argv into a string.

The remote user's login shell reads the command line sshd hands it, so every word is quoted
once here with POSIX rules (quote_argv); nobody writes nested quotes by hand."""

from __future__ import annotations

import os
import re

KIND = "ssh"
HOST_PAT = r"^(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(?::(?P<port>\d{1,5}))?$"


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
    return [*_own_master(base, dest, hop.port), *port, *options, "--", dest, *([remote] if remote is not None else [])]


def _own_master(base: list[str], dest: str, port: int | None) -> list[str]:
    """BASE with its control socket made this destination's own: `<dir>/<tag>-%C`, TAG a
    crc32 of the destination as written (alias, user, port) and the ssh config in use.
    OpenSSH's %C alone hashes the host, port and user it resolved, so another alias of the
    same host (another key, another ProxyJump) would ride the first one's open master and
    never meet its own failure (a key the host refuses would work while the master lives)."""
    import binascii
    out = []
    for word in base:
        if word.startswith("ControlPath=") and word.endswith("/%C"):
            key = "\0".join((os.environ.get("RUNWARD_SSH_CONFIG", ""), dest, str(port or ""))).encode()
            word = "%s%08x-%%C" % (word[:-2], binascii.crc32(key))
        out.append(word)
    return out


def wrap(hop, inner: list[str], ssh_base: list[str] | None = None) -> list[str]:
    return argv(hop, ssh_base or ["ssh"], [], quote_argv(inner))


def quote_argv(words: list[str]) -> str:
    """One string the remote POSIX shell splits back into exactly `words`."""
    import shlex
    return " ".join(shlex.quote(a) for a in words)
