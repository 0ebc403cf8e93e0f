"""hash and pull: files read where the job runs (push, their writing, is ops/sync.py)."""

import os

from ..core.procfs import in_container
from ..core.store import sha256_file
from ..core.wire import AgentFailure


def hashes(req, home):
    """The sha256 of each path now, keyed as asked (a relative path is taken from the home, as
    push puts it): None where it cannot be read, and why in "errors" (its strerror), so that
    a file missing is told from one unreadable (restart's check of files never deployed)."""
    out, errors = {}, {}
    for p in req.get("paths") or []:
        path = os.path.expanduser(p)
        if not os.path.isabs(path):
            path = os.path.join(os.path.expanduser("~"), path)
        try:
            out[p] = sha256_file(path)
        except OSError as e:
            out[p], errors[p] = None, e.strerror or str(e)
    return {"hashes": out, "errors": errors}


# --- pull: the mirror of push, bytes from here to the CLI

def pull(req, home, emit, send):
    """Stream each path (a file, or a directory tree) to the caller: an event per entry
    ({"entry": {"i", "rel", "type", "mode", ...}}), a file's bytes as data frames
    (wire.send_bytes: read and sent 1 MiB at a time, never held whole), then {"end":
    {"sha256", "size", "changed"}}: the sha256 of the bytes sent, and whether the file
    changed while it was read (size, mtime, ctime or the file under its name), in which case
    the CLI must not use them. Inside a tree, symlinks are sent as links (never followed)
    and what is neither file, directory nor link is listed as skipped."""
    import stat
    roots = []
    for p in req.get("paths") or []:
        path = os.path.expanduser(p)
        if not os.path.isabs(path):
            path = os.path.join(os.path.expanduser("~"), path)
        try:
            st = os.stat(path)  # a link named by the caller is followed, as scp does
        except OSError as e:
            raise AgentFailure("BadInput", "cannot read %s on %s: %s" % (path, os.uname().nodename, e.strerror),
                               "check the remote path")
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            raise AgentFailure("BadInput", "%s is neither a file nor a directory" % path, "pull files or directories")
        roots.append((path, stat.S_ISDIR(st.st_mode)))
    files, skipped = [], []
    for i, (path, is_dir) in enumerate(roots):
        if not is_dir:
            files.append(_send_file(path, {"i": i, "rel": "", "name": os.path.basename(path)}, emit, send))
            continue
        emit({"entry": {"i": i, "rel": "", "type": "dir", "mode": stat.S_IMODE(os.stat(path).st_mode)}})
        for ent in _walk(path, i, skipped):
            if ent["type"] == "file":
                files.append(_send_file(os.path.join(path, ent["rel"]), ent, emit, send, nofollow=True))
            else:
                emit({"entry": ent})
    return {"files": files, "skipped": skipped, "host": os.uname().nodename, "in_container": in_container(),
            "verified": ["sha256_on_target"]}


def _walk(root, i, skipped):
    """The tree under root, top down, as entries relative to it; links not followed."""
    import stat
    for d, dirs, names in os.walk(root):
        dirs.sort()
        for name in dirs + sorted(names):
            full = os.path.join(d, name)
            rel = os.path.relpath(full, root)
            try:
                st = os.lstat(full)
            except OSError:
                continue  # gone since the listing
            if stat.S_ISLNK(st.st_mode):
                yield {"i": i, "rel": rel, "type": "link", "target": os.readlink(full)}
            elif stat.S_ISDIR(st.st_mode):
                yield {"i": i, "rel": rel, "type": "dir", "mode": stat.S_IMODE(st.st_mode)}
            elif stat.S_ISREG(st.st_mode):
                yield {"i": i, "rel": rel, "type": "file"}
            else:
                skipped.append(full)


def _send_file(path, ent, emit, send, nofollow=False):
    import hashlib
    import stat
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | (os.O_NOFOLLOW if nofollow else 0))
    except OSError as e:  # unreadable, or swapped for a link since the listing
        raise AgentFailure("Failed", "cannot read %s: %s" % (path, e.strerror),
                           "the files pulled before it are in place, each verified; fix and pull again")
    try:
        st0 = os.fstat(fd)
        emit({"entry": dict(ent, type="file", mode=stat.S_IMODE(st0.st_mode), size=st0.st_size, remote=path)})
        h, n = hashlib.sha256(), 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
            send(chunk)
        st1 = os.fstat(fd)
    finally:
        os.close(fd)
    try:
        named = os.stat(path)
    except OSError:
        named = None
    sig = lambda s: (s.st_size, s.st_mtime_ns, s.st_ctime_ns)  # noqa: E731
    changed = (n != st0.st_size or sig(st1) != sig(st0) or named is None
               or (named.st_dev, named.st_ino) != (st0.st_dev, st0.st_ino))
    end = {"sha256": h.hexdigest(), "size": n, "changed": changed}
    emit({"end": end})
    return dict(end, remote=path)
