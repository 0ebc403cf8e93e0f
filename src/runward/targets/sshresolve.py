"""What an ssh hop means now: the user, host, port (and proxy) that `ssh -G` resolves it to.

A route to a far side (the resident's forward, its relay, the record that the far side has
this agent cached) is kept under this, never under the name as written: an alias re-pointed
to a replaced machine, or given another HostName by a second project's [ssh] config, must
never be answered by the machine it meant before (design rule 14).

`ssh -G` costs a process (5-20 ms), more than a warm status through the relay takes, so its
answer is kept in cache/ssh-resolved with the identity (inode, size, mtime, ctime) of every
config file ssh reads for it, its Includes and their folders: it is asked again once any of
them changed. A config that ssh reads differently without a file changing (`Match exec`,
`Match localnetwork`) is asked every time.
"""

from __future__ import annotations

import json
import os

from ..cache import cache_path, read_cache, write_cache

_KEPT_MAX = 64  # entries in cache/ssh-resolved: one per (config, destination)
RACY_S = 3  # seconds a config file's last change must be past before ssh -G's answer is kept


def resolved(hop) -> str | None:
    """"user@host:port" (with " jump J" / " command C" where ssh goes through a proxy) as
    ssh resolves hop now under the ssh config in use; None where ssh cannot say (a config it
    refuses: the call itself then fails and says why)."""
    cfg = os.environ.get("RUNWARD_SSH_CONFIG")
    cfg = os.path.abspath(cfg) if cfg else ""
    key = json.dumps([cfg, hop.user or "", hop.name, hop.port or 0])
    path = cache_path("ssh-resolved")
    try:
        kept = json.loads(read_cache(path) or b"{}")
    except ValueError:
        kept = {}
    if not isinstance(kept, dict):
        kept = {}
    entry = kept.get(key)
    if isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], list) and _unchanged(entry[0]):
        return entry[1]
    files, steady = _config_files(cfg)  # before ssh reads them: an edit after it shows next time
    got = _ask(cfg, hop)
    stale = kept.pop(key, None)
    if got is not None and steady:
        kept = dict(list(kept.items())[-(_KEPT_MAX - 1):])
        kept[key] = [files, got]
    elif stale is None:
        return got
    write_cache(path, json.dumps(kept).encode())
    return got


def _ask(cfg: str, hop, depth: int = 0) -> str | None:
    from .spawn import Spawned
    dest = f"{hop.user}@{hop.name}" if hop.user else hop.name
    argv = ["ssh", "-G", *(["-F", cfg] if cfg else []), *(["-p", str(hop.port)] if hop.port else []), "--", dest]
    try:
        proc = Spawned(argv)
    except OSError:
        return None
    proc.stdin.close()
    out = proc.stdout.read(1 << 20)
    rc = proc.wait()
    proc.stderr_bytes()
    if rc != 0:
        return None
    said = {}
    for line in out.decode("utf-8", "replace").splitlines():
        name, _, value = line.partition(" ")
        said.setdefault(name, value)
    if not said.get("hostname"):
        return None
    text = f"{said.get('user', '')}@{said['hostname']}:{said.get('port', '22')}"
    for name, word in (("proxyjump", "jump"), ("proxycommand", "command")):
        if said.get(name, "none") != "none":
            value = said[name]
            if name == "proxyjump":
                value = _jumps(cfg, value, depth)
                if value is None:
                    return None
            text += f" {word} {value}"
    return text


def _jumps(cfg: str, chain: str, depth: int) -> str | None:
    """A ProxyJump chain as ssh resolves each of its hosts now: `bastion` as written names
    whatever the config's Host bastion says, so re-pointing the bastion alone (another
    bastion, to another network's same private address) must change the answer too. None
    where ssh cannot resolve one, or the chain nests past a few levels."""
    from types import SimpleNamespace
    if depth >= 4:
        return None
    out = []
    for jump in chain.split(","):
        spec = jump.strip()
        spec = spec[len("ssh://"):] if spec.startswith("ssh://") else spec
        user, _, host = spec.rpartition("@")
        name, port = host, None
        if host.startswith("["):  # [v6]:port
            name, _, rest = host[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else None
        elif host.count(":") == 1:
            name, _, port = host.partition(":")
        got = _ask(cfg, SimpleNamespace(user=user or None, name=name, port=int(port) if port and port.isdigit() else None),
                   depth + 1)
        if got is None:
            return None
        out.append("(" + got + ")")
    return ",".join(out)


def _identity(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _unchanged(files: list) -> bool:
    return all(isinstance(f, list) and len(f) == 2 and isinstance(f[0], str) and _identity(f[0]) == f[1]
               for f in files)


def _config_files(cfg: str) -> tuple[list, bool]:
    """([path, identity] of each config file ssh reads (missing ones too: one created later
    changes the answer) and of each Include's folder, whether ssh's answer follows from
    them alone). Relative Includes are under ~/.ssh for the user's files (and -F's), under
    /etc/ssh for the system's (ssh_config(5)); OpenSSH finds ~ in passwd, not $HOME."""
    import glob
    import pwd
    dot_ssh = os.path.join(pwd.getpwuid(os.getuid()).pw_dir, ".ssh")
    todo = [(cfg, dot_ssh)] if cfg else [("/etc/ssh/ssh_config", "/etc/ssh"), (os.path.join(dot_ssh, "config"), dot_ssh)]
    files, steady = [], True
    while todo and len(files) < 64:
        path, rel = todo.pop()
        files.append([path, _identity(path)])
        try:
            with open(path, errors="replace") as f:
                text = f.read(1 << 20)
        except OSError:
            continue
        for line in text.splitlines():
            words = line.strip().replace("=", " ").lower().split()
            if words and words[0] == "match" and ("exec" in words or "localnetwork" in words):
                steady = False
            if words and words[0] == "include":
                for pat in line.strip().replace("=", " ").split()[1:]:
                    pat = os.path.join(rel, os.path.expanduser(pat))
                    files.append([os.path.dirname(pat), _identity(os.path.dirname(pat))])
                    todo += [(m, rel) for m in sorted(glob.glob(pat), reverse=True)]
    # a file changed within the last RACY_S may change again within its timestamp's granule
    # (whole seconds on ext4 with 128-byte inodes, NFS; 2 s on FAT) with the same size: its
    # identity would not change, and the answer kept now would be the old host's for good.
    # So an answer is kept only once its files are older than that (git's racy-clean rule)
    import time
    fresh = time.time_ns() - RACY_S * 1_000_000_000
    racy = any(f[1] is not None and max(f[1][2], f[1][3]) >= fresh for f in files)
    return files, steady and not racy and len(files) < 64
