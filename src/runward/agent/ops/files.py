"""push and hash: files written through the hop chain, so they land in the filesystem the
job sees; atomic (temp, fsync, rename) and checked by sha256 here."""

import os
import time

from ..procfs import in_container
from ..store import RunStore, file_hashes, read_json, remove_file, trusted_dir, write_all, write_json
from ..wire import AgentFailure


def read_exact(stdin, n, h):
    """Read exactly n bytes from stdin in chunks, feeding hash h; yield the chunks."""
    left = n
    while left > 0:
        chunk = stdin.read(min(left, 1 << 20))
        if not chunk:
            raise AgentFailure("Failed", "the byte stream ended early (%d bytes missing)" % left,
                               "the connection dropped or the local file shrank; push again")
        h.update(chunk)
        left -= len(chunk)
        yield chunk


def push(req, home, emit, stdin):
    """Write files sent after the request: each one to a temp file beside its destination,
    fsync, sha256 checked against the sender's and read back, then renamed into place
    (atomic), mode kept."""
    done = []
    for ent in req.get("files") or []:
        dest = os.path.expanduser(ent["remote"])
        if not os.path.isabs(dest):
            dest = os.path.join(os.path.expanduser("~"), dest)
        if ent.get("type") == "dir":
            plain = os.path.normpath(dest)  # "conf/" would be followed by lstat
            if os.path.islink(plain) and not trusted_dir(os.path.dirname(plain)):
                # others may have planted it: makedirs would accept it, chmod and the files
                # under it would go where it points
                raise AgentFailure("Failed", "%s is a symbolic link in a directory that others can write or "
                                   "that is not ours: not pushing through it" % dest,
                                   "remove the link, or push into a directory of your own")
            os.makedirs(dest, exist_ok=True)
            os.chmod(dest, int(ent.get("mode", 0o755)))
            done.append({"remote": dest, "type": "dir"})
            continue
        done.append(_receive(ent, dest, stdin))
        emit({"pushed": dest})
    if req.get("run"):
        _record_deployed(RunStore(home, req["run"]), done)
    return {"files": done, "verified": ["sha256_on_target"], "host": os.uname().nodename,
            "in_container": in_container()}


def _receive(ent, dest, stdin):
    """One file's bytes from stdin to dest, then its sha256 line; checked, renamed, verified.
    The directory may be others' (a sticky /tmp, a project directory of another user): the
    temp file gets a name nobody can guess and is created new, never through a link
    (O_EXCL|O_NOFOLLOW), so a symlink planted at any name is never written through; the hash
    is of what reads back through our own descriptor, and after the rename the destination
    must be that very file (device and inode), else the push fails."""
    import hashlib
    d = os.path.dirname(dest)
    if not os.path.isdir(d):
        os.makedirs(d)
    fd, tmp = _create_temp(d, os.path.basename(dest))
    try:
        h = hashlib.sha256()
        for chunk in read_exact(stdin, int(ent["size"]), h):
            write_all(fd, chunk, dest)
        sent = stdin.read(65).decode("ascii", "replace").strip()
        got = h.hexdigest()
        if sent != got:
            raise AgentFailure("Failed", "sha256 mismatch for %s: sent %s, received %s" % (dest, sent[:16], got[:16]),
                               "the bytes changed in transit or the local file changed while being read; push again")
        os.fchmod(fd, int(ent.get("mode", 0o644)) & 0o7777)
        os.fsync(fd)
        on_disk = _sha256_fd(fd)
        if on_disk != got:
            raise AgentFailure("Failed", "%s reads back with another sha256 than was written" % dest, "check the disk")
        os.rename(tmp, dest)
    except BaseException:
        os.close(fd)
        remove_file(tmp)
        raise
    try:
        _check_same_file(fd, dest)
    finally:
        os.close(fd)
    return {"remote": dest, "sha256": on_disk, "size": int(ent["size"]), "mode": oct(ent.get("mode", 0o644))}


def _create_temp(d, base):
    """(fd, path) of a new temp file in d, 0600, open for writing and reading back. The name
    is random (a pid is guessed: links were planted under the next pids' names) and O_EXCL
    with O_NOFOLLOW refuses any name already there, a symlink included; a taken name is
    retried with another."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(d, ".%s.runward-%s" % (base, os.urandom(8).hex()))
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise AgentFailure("Failed", "could not create a temp file beside %s: 100 random names were taken" % base,
                       "look at what fills %s" % d)


def _sha256_fd(fd):
    import hashlib
    h = hashlib.sha256()
    pos = 0
    while True:
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            return h.hexdigest()
        h.update(chunk)
        pos += len(chunk)


def _check_same_file(fd, dest):
    """The name dest must now be the file we wrote and hashed: in a directory others can
    write, it could have been swapped between our rename and now."""
    st, got = os.fstat(fd), None
    try:
        got = os.lstat(dest)
    except OSError:
        pass
    if got is None or (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
        raise AgentFailure("Failed", "%s is not the file written: it was replaced after the rename; "
                           "the push is not verified" % dest,
                           "someone else writes in %s; push into a directory of your own" % os.path.dirname(dest))


def _record_deployed(store, done):
    """deployed.json: the sha256 of what deploy wrote, for status to compare."""
    store.home.ensure()
    try:
        os.mkdir(store.dir, 0o700)
    except FileExistsError:
        pass
    dep = read_json(os.path.join(store.dir, "deployed.json"), {}) or {}
    for f in done:
        if f.get("sha256"):
            dep[f["remote"]] = {"sha256": f["sha256"], "at": time.time()}
    write_json(os.path.join(store.dir, "deployed.json"), dep)


def hashes(req, home):
    return {"hashes": file_hashes([os.path.expanduser(p) for p in req.get("paths") or []])}


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
