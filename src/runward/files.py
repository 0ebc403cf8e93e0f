"""Files through the hop chain: push (sync.py sends only what differs, rsync's way) and
pull, so they land in the filesystem the job sees, or come back from it.

`LOCAL:REMOTE` specs; directories are sent recursively. Bytes stream from disk in 1 MiB
chunks (a file of several GiB is never held in memory), each followed by its sha256; the
agent writes a temp file beside the destination, fsyncs, checks the hash, keeps the mode
bits, and renames it into place.
"""

from __future__ import annotations

import hashlib
import os

from .transport import agentcall as transport
from .errors import BadInput, RunwardError
from .targets import Target

CHUNK = 1 << 20


def push(target: Target, specs: list[str], *, run: str | None = None, progress: bool = False,
         base: str | None = None, delete: bool = False, excludes: list[str] | None = None,
         dry_run: bool = False, gitignore: bool = True) -> dict:
    """Send what differs from what the far side has (sync.py: rsync's way)."""
    from . import sync
    return sync.push(target, specs, run=run, progress=progress, base=base, delete=delete,
                     excludes=excludes, dry_run=dry_run, gitignore=gitignore)


from .sync import parse_spec  # noqa: E402  (push's spec syntax, shared with local_drift)


def local_drift(target_status: dict, specs: list[str], base: str | None = None) -> list[dict]:
    """Files whose local bytes differ from what was last deployed (by sha256), in pushed
    directories too (their ignore files respected, as deploy does); hashed through the
    local hash cache deploy uses (sync.LocalHashes), so an unchanged tree is not re-read.
    In a pushed directory, a file added locally and never deployed, and a deployed file
    deleted locally, are drift too ("change"): either way the target's tree is not the local
    one, and a restart would run what the operator changed away from."""
    from .sync import LocalHashes
    deployed = target_status.get("deployed") or {}
    hashes, out = LocalHashes(), []
    for root, key in _roots(specs, base, deployed):
        local_files = {rel: e for rel, e in root["entries"].items() if e["t"] == "f"}
        is_dir = bool(root.get("tree"))
        for rel, e in local_files.items():
            remote = _remote_of(root, rel)
            rec = deployed.get(key(remote))
            try:
                got = hashes.sha256(e["local"]) if rec is not None or is_dir else None
            except OSError as err:  # its bytes unknown here: not "the same", and no traceback
                out.append({"local": e["local"], "remote": remote, "local_sha256": None,
                            "deployed_sha256": (rec or {}).get("sha256"),
                            "change": f"unreadable locally ({err.strerror or err})"})
                continue
            if rec is None:
                if is_dir and _any_under(deployed, key(root["remote"])):
                    out.append({"local": e["local"], "remote": remote, "local_sha256": got,
                                "deployed_sha256": None, "change": "added locally, never deployed"})
            elif got != rec["sha256"]:
                out.append({"local": e["local"], "remote": remote, "local_sha256": got, "deployed_sha256": rec["sha256"]})
        if is_dir:
            top = key(root["remote"]).rstrip("/") + "/"
            local_root = os.path.join(root.get("local") or "", "")
            for k, rec in deployed.items():
                rel = k[len(top):] if k.startswith(top) else None
                if rel and rel not in local_files:
                    out.append({"local": os.path.join(local_root, rel) if local_root else rel, "remote": k,
                                "local_sha256": None, "deployed_sha256": rec.get("sha256"),
                                "change": "deleted locally, still deployed (deploy --delete removes it)"})
    hashes.save()
    return out


def undeployed_drift(target: Target, target_status: dict, specs: list[str], base: str | None = None) -> list[dict]:
    """What local_drift cannot see: the files runward has no deploy record of (scp'd, pushed to
    another path, never deployed) compared with the file the target has now (one `hash`
    round trip, only when there are such files). A difference, or a file missing there, is
    drift ("change" says which); a file the target cannot read is "unknown": not the same,
    and not known to differ."""
    from .sync import LocalHashes
    deployed = target_status.get("deployed") or {}
    ask: dict[str, dict] = {}
    for root, key in _roots(specs, base, deployed):
        if root.get("tree") and _any_under(deployed, key(root["remote"])):
            continue  # a deployed directory: local_drift reads it against its record
        for rel, e in root["entries"].items():
            remote = _remote_of(root, rel)
            if e["t"] == "f" and deployed.get(key(remote)) is None:
                ask[remote] = {"local": e["local"], "remote": remote}
    if not ask:
        return []
    there = transport.call(target, {"op": "hash", "paths": list(ask)})
    hashes, out = LocalHashes(), []
    for remote, d in ask.items():
        try:
            d["local_sha256"] = hashes.sha256(d["local"])
        except OSError as err:
            out.append(dict(d, local_sha256=None, change=f"unreadable locally ({err.strerror or err}): unknown"))
            continue
        got, why = (there.get("hashes") or {}).get(remote), (there.get("errors") or {}).get(remote)
        d["target_sha256"] = got
        if got is None and why and "No such file" not in why:
            out.append(dict(d, change=f"unknown: never deployed by runward, and the target cannot read it ({why})",
                            unknown=True))
        elif got is None:
            out.append(dict(d, change="never deployed by runward, and not on the target"))
        elif got != d["local_sha256"]:
            out.append(dict(d, change="never deployed by runward, and the target's copy differs"))
    hashes.save()
    return out


def _roots(specs: list[str], base: str | None, deployed: dict):
    """(root, key) for each spec's local source as deploy walks it (sync.source_roots) and its
    remote path's key in deployed.json (_deployed_key); a local path gone is passed over: it
    is not drift of what was deployed."""
    from .sync import source_roots
    for spec in specs:
        try:
            root = source_roots([spec], base, [], True)[0]
        except BadInput:
            continue
        yield root, _deployed_key(deployed, root["remote"])


def _remote_of(root: dict, rel: str) -> str:
    """The remote path of a root's entry REL ("" is the root itself, a single file)."""
    return root["remote"].rstrip("/") + "/" + rel if rel else root["remote"]


def _deployed_key(deployed: dict, root_remote: str):
    """remote path -> its key in deployed.json: a "~/..." destination is recorded as the far
    side expanded it ("/root/..."), so the home's path is read off a key that ends there."""
    if not root_remote.startswith("~"):
        return lambda remote: remote
    rest = "/" + root_remote[1:].lstrip("/").rstrip("/")
    home = next((k[:k.index(rest)] for k in deployed
                 if rest in k and (k.endswith(rest) or k[k.index(rest) + len(rest)] == "/")), None)
    if home is None:
        return lambda remote: remote
    return lambda remote: home + "/" + remote[1:].lstrip("/") if remote.startswith("~") else remote


def _any_under(deployed: dict, d: str) -> bool:
    top = d.rstrip("/") + "/"
    return any(k.startswith(top) for k in deployed)


def check_sources(specs: list[str], base: str | None = None) -> None:
    """Read now what a deploy of specs would send: each source there, each directory listed,
    each file opened (gitignore rules as deploy reads them). A restart calls it before it
    stops anything, so a file gone or unreadable refuses the restart (BadInput, naming
    it) instead of leaving the run stopped."""
    from .sync import source_roots
    try:
        roots = source_roots(specs, base, [], True)
    except OSError as e:  # a directory inside a pushed tree that cannot be listed
        raise BadInput(f"cannot read {e.filename}: {e.strerror}", "check the local files of the run's `files`")
    for root in roots:
        for e in root["entries"].values():
            if e["t"] != "f":
                continue
            try:  # O_NONBLOCK: a file swapped for a fifo since the walk cannot hang the check
                os.close(os.open(e["local"], os.O_RDONLY | os.O_NONBLOCK))
            except OSError as x:
                raise BadInput(f"cannot read {e['local']} (from {root['local']}): {x.strerror}",
                               "check the local files of the run's `files`")


# --- pull: the mirror of push ------------------------------------------------------------

def parse_pull_spec(spec: str) -> tuple[str, str]:
    remote, sep, local = spec.rpartition(":")
    if not sep or not local or not remote:
        raise BadInput(f"invalid pull spec {spec!r}", "write REMOTE:LOCAL, e.g. /root/work/ckpt:./ckpt")
    return remote, local


def pull(target: Target, specs: list[str], *, base: str | None = None) -> dict:
    """Bring REMOTE paths here through the hop chain: streamed (1 MiB at a time, never a
    whole file in memory), each file checked against the sha256 the far side computed of
    what it sent, written to a temp file in its destination directory, fsynced and renamed
    into place with its mode: a local file is replaced only by a verified copy. A file that
    changed on the far side while it was read, or whose bytes do not hash as sent, is not
    written; the others are, and the pull fails (exit 1) naming it."""
    pairs = [parse_pull_spec(s) for s in specs]
    sink = _PullSink([os.path.join(base, loc) if base and not os.path.isabs(os.path.expanduser(loc))
                      else os.path.expanduser(loc) for _, loc in pairs], [r for r, _ in pairs])
    try:
        res = transport.call(target, {"op": "pull", "paths": [r for r, _ in pairs]},
                             on_event=sink.event, on_data=sink.data)
        sink.finish_dirs()
    except OSError as e:  # writing here failed: the far side was ended at once (transport)
        raise RunwardError(f"cannot write {e.filename or 'a local file'}: {e.strerror}",
                           "check the local destination (space, permissions), then pull again",
                           result={"files": sink.done})
    except KeyboardInterrupt:
        from .errors import Interrupted
        raise Interrupted(f"interrupted: {len(sink.done)} file(s) pulled and verified before it (result.files); "
                          "the one in flight was not written (no temp file is left) and the rest were not pulled",
                          "pull again to finish", result={"files": sink.done})
    finally:
        sink.abandon()
    res["files"] = sink.done
    res["verified"] = ["sha256_checked_locally"]
    res["bytes"] = sum(f.get("size", 0) for f in sink.done)
    if sink.failed:
        raise RunwardError(f"{len(sink.failed)} file(s) not pulled: " + "; ".join(
            f"{f['local']}: {f['why']}" for f in sink.failed),
            "pull again once the file is no longer being written", result=dict(res, failed=sink.failed))
    return res


class _PullSink:
    """What the pull's events and bytes become on this side."""

    def __init__(self, locals_: list[str], remotes: list[str]):
        self.locals = locals_
        self.remotes = remotes
        self.done: list[dict] = []
        self.failed: list[dict] = []
        self.dirs: list[tuple[str, int]] = []
        self.cur: dict | None = None  # the file being received: fd, tmp, dest, hash, entry

    def _dest(self, ent: dict) -> str:
        i = int(ent["i"])
        root = self.locals[i]
        rel = ent.get("rel") or ""
        if not rel and ent["type"] == "dir":
            # as scp -r and rsync: `ckpt:./` into an existing directory makes ./ckpt; `ckpt/:./`
            # (a trailing slash) copies what is in it; a LOCAL that does not exist becomes the copy
            name = os.path.basename(self.remotes[i])
            if name not in ("", ".", "..") and (root.endswith("/") or os.path.isdir(root)):
                self.locals[i] = root = os.path.join(root, name)
            return root.rstrip("/") or root
        if not rel:
            if ent["type"] == "file" and (root.endswith("/") or os.path.isdir(root)):
                return os.path.join(root, ent.get("name") or "pulled")
            return root.rstrip("/") or root
        norm = os.path.normpath(rel)
        if os.path.isabs(norm) or norm == ".." or norm.startswith(".." + os.sep):
            raise BadInput(f"the far side sent a path outside the pulled tree: {rel!r}", "pull refused it")
        return os.path.join(root, norm)

    def event(self, ev: dict) -> None:
        if "entry" in ev:
            ent = ev["entry"]
            dest = self._dest(ent)
            if ent["type"] == "dir":
                self._make_dir(dest, ent)
            elif ent["type"] == "link":
                self._make_link(dest, ent)
            else:
                self._open_file(dest, ent)
        elif "end" in ev and self.cur is not None:
            self._close_file(ev["end"])

    def data(self, chunk: bytes) -> None:
        if self.cur is not None:
            self.cur["hash"].update(chunk)
            _write_all(self.cur["fd"], chunk)

    def _make_dir(self, dest: str, ent: dict) -> None:
        if os.path.islink(dest.rstrip("/")) and ent.get("rel"):
            raise BadInput(f"{dest} is a symbolic link here: not pulling through it", "remove the link and pull again")
        os.makedirs(dest, mode=0o700, exist_ok=True)
        self.dirs.append((dest, int(ent.get("mode", 0o755))))  # modes set last: a 0555 dir must take its files

    def _make_link(self, dest: str, ent: dict) -> None:
        tmp = _temp_name(dest)
        os.symlink(ent["target"], tmp)
        os.rename(tmp, dest)
        self.done.append({"local": dest, "type": "link", "target": ent["target"]})

    def _open_file(self, dest: str, ent: dict) -> None:
        d = os.path.dirname(dest) or "."
        os.makedirs(d, exist_ok=True)
        if os.path.isdir(dest) and not os.path.islink(dest):
            raise BadInput(f"{dest} is a directory here; the remote path is a file", "give a file path as LOCAL")
        tmp = _temp_name(dest)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self.cur = {"fd": fd, "tmp": tmp, "dest": dest, "hash": hashlib.sha256(), "mode": int(ent.get("mode", 0o644)),
                    "remote": ent.get("remote")}

    def _close_file(self, end: dict) -> None:
        cur, self.cur = self.cur, None
        got = cur["hash"].hexdigest()
        why = ("it changed on the far side while it was read" if end.get("changed") else
               f"sha256 mismatch: the far side sent {end.get('sha256', '')[:16]}, received {got[:16]}"
               if got != end.get("sha256") else None)
        try:
            if why is None:
                os.fchmod(cur["fd"], cur["mode"] & 0o7777)
                os.fsync(cur["fd"])
        finally:
            os.close(cur["fd"])
        if why is not None:
            os.unlink(cur["tmp"])
            self.failed.append({"local": cur["dest"], "why": why})
            return
        os.rename(cur["tmp"], cur["dest"])
        _fsync_dir(os.path.dirname(cur["dest"]) or ".")
        self.done.append({"local": cur["dest"], "remote": cur["remote"], "type": "file", "sha256": got,
                          "size": end.get("size"), "mode": oct(cur["mode"])})

    def abandon(self) -> None:
        """A pull that ended mid-file (an error, Ctrl-C) leaves no temp file behind."""
        if self.cur is not None:
            os.close(self.cur["fd"])
            os.unlink(self.cur["tmp"])
            self.cur = None

    def finish_dirs(self) -> None:
        for d, mode in reversed(self.dirs):
            os.chmod(d, mode & 0o7777)


def _temp_name(dest: str) -> str:
    return os.path.join(os.path.dirname(dest) or ".", f".{os.path.basename(dest)}.runward-{os.urandom(8).hex()}")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fsync_dir(d: str) -> None:
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError:
        pass  # a filesystem that cannot sync a directory (EINVAL)
    finally:
        os.close(fd)
