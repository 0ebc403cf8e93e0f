"""Pushing files through the hop chain, so they land in the filesystem the job sees.

`LOCAL:REMOTE` specs; directories are sent recursively. Bytes stream from disk in 1 MiB
chunks (a file of several GiB is never held in memory), each followed by its sha256; the
agent writes a temp file beside the destination, fsyncs, checks the hash, keeps the mode
bits, and renames it into place.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
import time

from . import transport
from .errors import BadInput, RunwardError
from .targets import Target

CHUNK = 1 << 20


def parse_spec(spec: str) -> tuple[str, str]:
    local, sep, remote = spec.partition(":")
    if not sep or not local or not remote:
        raise BadInput(f"invalid file spec {spec!r}", "write LOCAL:REMOTE, e.g. train.py:/root/work/train.py")
    return local, remote


def plan(specs: list[str], base: str | None = None) -> list[dict]:
    """Expand specs into entries: {local, remote, type, mode, size}. Directories recurse."""
    entries: list[dict] = []
    for spec in specs:
        local, remote = parse_spec(spec)
        local = os.path.expanduser(local)
        if base and not os.path.isabs(local):
            local = os.path.join(base, local)
        try:
            st = os.stat(local)
        except OSError as e:
            raise BadInput(f"cannot read {local!r} (from {spec!r}): {e.strerror}", "check the local path")
        if stat.S_ISDIR(st.st_mode):
            entries.append({"local": local, "remote": remote, "type": "dir", "mode": stat.S_IMODE(st.st_mode)})
            for root, dirs, files in os.walk(local):
                dirs.sort()
                rel = os.path.relpath(root, local)
                rroot = remote if rel == "." else remote.rstrip("/") + "/" + rel.replace(os.sep, "/")
                for d in dirs:
                    m = stat.S_IMODE(os.stat(os.path.join(root, d)).st_mode)
                    entries.append({"local": os.path.join(root, d), "remote": rroot.rstrip("/") + "/" + d,
                                    "type": "dir", "mode": m})
                for f in sorted(files):
                    p = os.path.join(root, f)
                    if os.path.islink(p) or not os.path.isfile(p):
                        continue
                    fst = os.stat(p)
                    entries.append({"local": p, "remote": rroot.rstrip("/") + "/" + f, "type": "file",
                                    "mode": stat.S_IMODE(fst.st_mode), "size": fst.st_size})
        elif stat.S_ISREG(st.st_mode):
            if remote.endswith("/"):
                remote = remote + os.path.basename(local)
            entries.append({"local": local, "remote": remote, "type": "file", "mode": stat.S_IMODE(st.st_mode),
                            "size": st.st_size})
        else:
            raise BadInput(f"{local!r} is neither a file nor a directory", "push regular files or directories")
    return entries


class Progress:
    """A one-line progress bar on stderr, only on a terminal."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.sent, self.enabled = max(total, 1), 0, enabled and sys.stderr.isatty()
        self.t0 = self.last = time.monotonic()

    def add(self, n: int) -> None:
        self.sent += n
        now = time.monotonic()
        if self.enabled and (now - self.last > 0.1 or self.sent >= self.total):
            self.last = now
            frac = self.sent / self.total
            rate = self.sent / max(now - self.t0, 1e-6) / (1 << 20)
            bar = "#" * int(frac * 30)
            sys.stderr.write(f"\r  [{bar:<30}] {frac:6.1%} {self.sent / (1 << 20):8.1f} MiB {rate:7.1f} MiB/s")
            sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")


def stream(entries: list[dict], progress: Progress):
    for e in entries:
        if e["type"] != "file":
            continue
        h = hashlib.sha256()
        left = e["size"]
        with open(e["local"], "rb") as f:
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    break  # the file shrank: the far side sees a short stream and refuses it
                h.update(chunk)
                left -= len(chunk)
                progress.add(len(chunk))
                yield chunk
            if left == 0 and f.read(1):
                # the file grew while we read it: send a hash that cannot match, so the far side refuses it
                yield b"0" * 64 + b"\n"
                continue
        yield h.hexdigest().encode() + b"\n"


def push(target: Target, specs: list[str], *, run: str | None = None, progress: bool = False,
         base: str | None = None) -> dict:
    entries = plan(specs, base)
    total = sum(e.get("size", 0) for e in entries)
    bar = Progress(total, progress)
    req = {"op": "push", "run": run,
           "files": [{k: e[k] for k in ("remote", "type", "mode", "size") if k in e} for e in entries]}
    try:
        res = transport.call(target, req, payload=stream(entries, bar))
    finally:
        bar.close()
    by_remote = {e["remote"]: e for e in entries}
    for f in res["files"]:
        ent = next((e for r, e in by_remote.items() if f["remote"].endswith(r.lstrip("~/")) or f["remote"] == r), None)
        if ent is not None:
            f["local"] = ent["local"]
    res["bytes"] = total
    return res


def local_drift(target_status: dict, specs: list[str], base: str | None = None) -> list[dict]:
    """Files whose local bytes differ from what was last deployed (by sha256)."""
    deployed = target_status.get("deployed") or {}
    out = []
    for spec in specs:
        local, remote = parse_spec(spec)
        local = os.path.join(base, local) if base and not os.path.isabs(local) else local
        if not os.path.isfile(local):
            continue
        rec = next((v for k, v in deployed.items() if k == remote or k.endswith("/" + remote.lstrip("~/"))), None)
        if rec is None:
            continue
        h = hashlib.sha256()
        with open(local, "rb") as f:
            for chunk in iter(lambda: f.read(CHUNK), b""):
                h.update(chunk)
        if h.hexdigest() != rec["sha256"]:
            out.append({"local": local, "remote": remote, "local_sha256": h.hexdigest(), "deployed_sha256": rec["sha256"]})
    return out
