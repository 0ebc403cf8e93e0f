"""push and deploy as rsync does them: one round trip asks the far side what is there (the
agent's `manifest`: sizes, modes, and the sha256 of every file we hold at the same size,
computed there and cached by inode), then one more sends only what differs (`push`): new and
changed files streamed 1 MiB at a time, links as links, and with --delete the removal of
what the source no longer has. Unchanged files are named as such, never re-sent.

The source tree is walked without following links (a link inside it is sent as a link), and
.gitignore / .runwardignore in each directory and --exclude patterns leave their paths out
(ignore.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import sys
import time

from .transport import agentcall as transport
from .errors import BadInput, OperationFailed, RunwardError
from .ignore import Matcher
from .targets import Target

CHUNK = 1 << 20


def parse_spec(spec: str) -> tuple[str, str]:
    local, sep, remote = spec.partition(":")
    if not sep or not local or not remote:
        raise BadInput(f"invalid file spec {spec!r}", "write LOCAL:REMOTE, e.g. train.py:/root/work/train.py")
    return local, remote


def source_roots(specs: list[str], base: str | None, excludes: list[str], gitignore: bool) -> list[dict]:
    """One root per spec: {local, remote, tree, entries: {rel: entry}} ("" is a file root's
    file). An entry: {t: f|d|l, mode, size, mtime_ns, local, target}."""
    roots = []
    for spec in specs:
        local, remote = parse_spec(spec)
        local = os.path.expanduser(local)
        if base and not os.path.isabs(local):
            local = os.path.join(base, local)
        try:
            st = os.stat(local)  # a link named on the command line is followed, as scp does
        except OSError as e:
            raise BadInput(f"cannot read {local!r} (from {spec!r}): {e.strerror}", "check the local path")
        if stat.S_ISDIR(st.st_mode):
            entries: dict[str, dict] = {}
            matcher = Matcher(excludes, gitignore)
            _walk(local, "", matcher, entries)
            roots.append({"local": local, "remote": remote, "tree": True, "mode": stat.S_IMODE(st.st_mode),
                          "entries": entries, "matcher": matcher})
        elif stat.S_ISREG(st.st_mode):
            if remote.endswith("/"):
                remote += os.path.basename(local)
            roots.append({"local": local, "remote": remote, "tree": False, "entries": {"": _entry(local, st)}})
        else:
            raise BadInput(f"{local!r} is neither a file nor a directory", "push regular files or directories")
    return roots


def _entry(path: str, st: os.stat_result) -> dict:
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return {"t": "l", "mode": mode, "target": os.readlink(path), "local": path}
    if stat.S_ISDIR(st.st_mode):
        return {"t": "d", "mode": mode, "local": path}
    return {"t": "f", "mode": mode, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "local": path}


def _walk(root: str, rel: str, matcher: Matcher, out: dict) -> None:
    matcher.enter(root, rel)
    with os.scandir(os.path.join(root, rel)) as it:
        found = sorted(it, key=lambda e: e.name)
    for e in found:
        r = f"{rel}/{e.name}" if rel else e.name
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue  # gone since the listing
        is_dir = stat.S_ISDIR(st.st_mode)
        if not (is_dir or stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) or matcher.excluded(r, is_dir):
            continue  # a socket or fifo has no bytes to send; excluded paths stay home
        out[r] = _entry(e.path, st)
        if is_dir:
            _walk(root, r, matcher, out)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


class LocalHashes:
    """sha256 of the local files, cached in runward's local cache as the far side caches its
    own (agent/core/hashcache.py): by device, inode, size, mtime and ctime, and only for a file
    last changed more than RACY_S before it was read; a redeploy of unchanged weights does
    not read them here either."""

    RACY_S, KEEP = 2.0, 20000

    def __init__(self):
        from .cache import cache_path, read_cache
        self.path = cache_path("local-hashes.json")  # hashes.json is the agent's, for a local target
        try:
            self.entries = json.loads(read_cache(self.path) or b"{}")
        except ValueError:
            self.entries = {}
        if not isinstance(self.entries, dict):
            self.entries = {}
        self.dirty = False

    def sha256(self, path: str) -> str:
        st = os.stat(path)
        key, sig = f"{st.st_dev}:{st.st_ino}", [st.st_size, st.st_mtime_ns, st.st_ctime_ns]
        e = self.entries.get(key)
        if isinstance(e, list) and e[:3] == sig:
            return e[3]
        got = sha256_file(path)
        after = os.stat(path)
        if [after.st_size, after.st_mtime_ns, after.st_ctime_ns] == sig and \
                time.time() - st.st_mtime_ns / 1e9 > self.RACY_S:
            self.entries[key] = sig + [got]
            self.dirty = True
        return got

    def save(self) -> None:
        from .cache import write_cache
        if self.dirty:
            keep = dict(list(self.entries.items())[-self.KEEP:])  # the newest last (insertion order)
            write_cache(self.path, json.dumps(keep, separators=(",", ":")).encode())


def diff(root: dict, there: dict, delete: bool, hashes: LocalHashes) -> tuple[list[dict], list[dict]]:
    """(items to send or do, unchanged files) for one root, from the far side's manifest."""
    items, same, far = [], [], there.get("entries") or {}
    items += [{"rel": rel, "t": "x", "type": "temp", "size": 0} for rel, f in far.items() if f[0] == "t"]
    far = {rel: f for rel, f in far.items() if f[0] != "t"}
    if delete and root["tree"]:
        items += _deletions(root, far)
    for rel, e in root["entries"].items():
        f = far.get(rel)
        if e["t"] == "f" and f and f[0] == "d" and not delete:  # the plan finds it: a dry run says it too
            raise OperationFailed(f"{_dest(there.get('remote') or root['remote'], rel)} is a directory there; the source "
                           "has a file", "remove the directory on the target, or push with --delete from its parent")
        if e["t"] == "d" and f and f[0] == "f" and not delete:  # its bytes would go, unsaid
            raise OperationFailed(f"{_dest(there.get('remote') or root['remote'], rel)} is a file there; the source "
                                  "has a directory", "remove the file on the target, or push with --delete from its parent")
        if e["t"] == "d":
            if not f or f[0] != "d" or f[2] != e["mode"]:
                items.append({"rel": rel, "t": "d", "mode": e["mode"]})
        elif e["t"] == "l":
            if not f or f[0] != "l" or f[3] != e["target"]:
                items.append({"rel": rel, "t": "l", "target": e["target"]})
        elif (f and f[0] == "f" and f[1] == e["size"] and f[2] == e["mode"] and f[3]
              and f[3] == hashes.sha256(e["local"])):
            same.append({"rel": rel, "local": e["local"], "size": e["size"], "sha256": f[3]})
        else:
            items.append({"rel": rel, "t": "f", "mode": e["mode"], "size": e["size"], "mtime_ns": e["mtime_ns"],
                          "local": e["local"]})
    if root["tree"] and (not there.get("exists") or there.get("mode") != root["mode"]):
        items.insert(len([i for i in items if i["t"] == "x"]), {"rel": "", "t": "d", "mode": root["mode"]})
    return items, same


def _deletions(root: dict, far: dict) -> list[dict]:
    """What the far side has under the pushed directory that the source has not (or has as
    another type), deepest first; excluded paths are kept there, as rsync keeps them."""
    ours, matcher, out = root["entries"], root["matcher"], []
    for rel in sorted(far, reverse=True):
        f, e = far[rel], ours.get(rel)
        conflict = e is not None and f[0] == "d" and e["t"] != "d"
        if (e is not None and not conflict) or matcher.excluded_path(rel, f[0] == "d"):
            continue
        out.append({"rel": rel, "t": "x", "type": {"f": "file", "d": "dir", "l": "link"}.get(f[0], "other"),
                    "size": f[1]})
    return out


def refuse_delete_root(remote: str) -> None:
    """--delete under / or a home directory would be a disaster from one typo: refused here
    on the words, and by the agent on the directory it resolves (device and inode)."""
    r = remote.rstrip("/")
    if r in ("", "~", "$HOME") or r.startswith("~") and "/" not in r:
        raise BadInput(f"--delete refused for {remote!r}: it is / or a home directory",
                       "push into a directory of its own (e.g. ~/work/NAME) to use --delete")


def push(target: Target, specs: list[str], *, run: str | None = None, progress: bool = False,
         base: str | None = None, delete: bool = False, excludes: list[str] | None = None,
         dry_run: bool = False, gitignore: bool = True) -> dict:
    """Send what differs (see the module's doc). The result: files (= sent: remote, local,
    sha256, size), unchanged, deleted, links, with byte counts; dry_run: what would happen,
    nothing changed."""
    roots = source_roots(specs, base, list(excludes or []), gitignore)
    if delete:
        for r in roots:
            if r["tree"]:
                refuse_delete_root(r["remote"])
    req = {"op": "manifest", "roots": [{"remote": r["remote"], "tree": r["tree"], "delete": delete, "want": {
        rel: e["size"] for rel, e in r["entries"].items() if e["t"] == "f"}} for r in roots]}
    man = transport.call(target, req)
    there = man["roots"]
    items, keep, hashes = [], [], LocalHashes()
    for i, (r, t) in enumerate(zip(roots, there)):
        its, same = diff(r, t, delete, hashes)
        items += [dict(it, i=i) for it in its]
        keep += [dict(s, i=i, remote=_dest(t["remote"], s["rel"])) for s in same]
    hashes.save()
    res = _plan_result(roots, there, items, keep)
    res.update(host=man.get("host"), in_container=man.get("in_container"))
    if dry_run or (not items and run is None):
        # nothing to write and no deploy record to keep: the second round trip is saved
        res.update(dry_run=dry_run, verified=[] if dry_run else ["sha256_on_target"])
        return res
    sends = [it for it in items if it["t"] == "f"]
    bar = Progress(sum(it["size"] for it in sends), progress)
    req = {"op": "push", "run": run, "delete": delete,
           "roots": [{"remote": r["remote"], "tree": r["tree"]} for r in roots],
           "items": [{k: v for k, v in it.items() if k != "local"} for it in items],
           "keep": [[k["i"], k["rel"], k["sha256"]] for k in keep]}
    failed: list = []
    try:
        got = transport.call(target, req, payload=coalesce(stream(sends, bar, failed)))
    except RunwardError:
        if failed:
            raise BadInput(f"cannot read {failed[0][0]}: {failed[0][1]}",
                           "check the local file and push again (what differs is sent again)") from None
        raise
    finally:
        bar.close()
    local_of = {_dest(there[it["i"]]["remote"], it["rel"]): it["local"] for it in sends}
    for f in got["files"]:
        f["local"] = local_of.get(f["remote"])
    res.update({k: got[k] for k in ("files", "links", "deleted", "verified", "host", "in_container")})
    res["temps_removed"] = got.get("temps_removed", [])
    res["sent"] = res["files"]
    res["bytes_deleted"] = sum(d.get("size") or 0 for d in got["deleted"])
    return res


def _dest(remote: str, rel: str) -> str:
    return remote.rstrip("/") + "/" + rel if rel else remote


def _plan_result(roots, there, items, keep) -> dict:
    at = lambda it: _dest(there[it["i"]]["remote"], it["rel"])  # noqa: E731
    sends = [{"remote": at(it), "local": it["local"], "size": it["size"]} for it in items if it["t"] == "f"]
    dels = [{"remote": at(it), "type": it["type"], "size": it["size"]} for it in items
            if it["t"] == "x" and it["type"] != "temp"]
    return {"sent": sends, "files": sends, "links": [{"remote": at(it), "target": it["target"]}
                                                     for it in items if it["t"] == "l"],
            "unchanged": [{"remote": k["remote"], "local": k["local"], "size": k["size"], "sha256": k["sha256"]}
                          for k in keep],
            "deleted": dels, "bytes_sent": sum(s["size"] for s in sends),
            "bytes_unchanged": sum(k["size"] for k in keep), "bytes_deleted": sum(d["size"] or 0 for d in dels),
            "bytes": sum(s["size"] for s in sends), "dry_run": False}


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


def coalesce(chunks, size: int = 1 << 20):
    """The same bytes in pieces of about size: a tree of small files is otherwise two pipe
    writes per file (its bytes, its hash line), each a wakeup of ssh and of the reader."""
    buf, n = [], 0
    for c in chunks:
        buf.append(c)
        n += len(c)
        if n >= size:
            yield b"".join(buf)
            buf, n = [], 0
    if buf:
        yield b"".join(buf)


def stream(sends: list[dict], progress: Progress, failed: list | None = None):
    """Each file's bytes, then its sha256 line: what the agent's push reads, in item order.
    A file that cannot be read here ends the stream (the far side sees it end, removes its
    temp file and fails), and goes into failed for the error to name."""
    try:
        yield from _stream(sends, progress)
    except OSError as e:
        if failed is None:
            raise
        failed.append((e.filename, e.strerror))


def _stream(sends: list[dict], progress: Progress):
    for e in sends:
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
