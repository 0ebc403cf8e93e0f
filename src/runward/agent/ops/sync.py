"""manifest and push: deploy as rsync does it, in two round trips. `manifest` says what is at
each destination (type, size, mode, and the sha256 of the files the caller has at the same
size, from the hash cache); the CLI then sends only what differs, and `push` writes it: each
file to a temp file beside its destination, checked by sha256, fsynced and renamed into place
(a reader, or a push cut mid-file, sees the old file or the new one, never half), links as
links, and with --delete removes what the source no longer has.

Every directory is reached through descriptors from / (safepath): nothing is written through
a symbolic link planted on the way or inside the tree."""

import errno
import os
import stat
import time

from ..core.hashcache import HashCache, sha256_fd
from ..core.procfs import in_container
from ..proc.safepath import DIR_FLAGS, DirCache, open_root, same_dir
from ..core.store import RunStore, read_json, write_all, write_json
from ..core.wire import AgentFailure, bad_input

TEMP_MARK = ".runward-"


def is_temp(name):
    """A temp file of ours (".NAME.runward-<16 hex>"), left by a push cut mid-file."""
    i = name.rfind(TEMP_MARK)
    return name.startswith(".") and i > 0 and len(name) - i - len(TEMP_MARK) == 16


STALE_S = 3600  # a temp file of ours untouched this long belongs to no running push


def _stale(dfd, name):
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and time.time() - st.st_mtime > STALE_S


def _full(remote):
    path = os.path.expanduser(remote)
    return path if os.path.isabs(path) else os.path.join(os.path.expanduser("~"), path)


def _os_failure(e, what):
    return AgentFailure("Failed", "%s on %s: %s" % (what, os.uname().nodename, e.strerror or e),
                        "check the destination path and its permissions")


# --- manifest: what is there ----------------------------------------------------------------

def manifest(req, home):
    cache = HashCache(home)
    out = []
    for root in req.get("roots") or []:
        path = _full(root["remote"])
        try:
            out.append(_manifest_root(path, root, cache, home))
        except OSError as e:
            raise _os_failure(e, "cannot read %s" % path)
    cache.save()
    return {"roots": out, "host": os.uname().nodename, "in_container": in_container()}


def _manifest_root(path, root, cache, home):
    want = root.get("want") or {}
    if not root.get("tree"):
        d, name = os.path.split(path.rstrip("/"))
        fd = open_root(d)
        if fd is None:
            return {"remote": path, "exists": False, "entries": {}}
        try:
            ent = _entry(fd, name, want.get(""), cache)
        finally:
            os.close(fd)
        return {"remote": path, "exists": ent is not None, "entries": {"": ent} if ent else {}}
    fd = open_root(path)
    if fd is None:
        return {"remote": path, "exists": False, "entries": {}}
    if root.get("delete"):
        _refuse_delete(fd, path, home)  # before a listing of all of / or ~
    entries = {}
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        _list(fd, "", want, cache, entries)
    finally:
        os.close(fd)
    return {"remote": path, "exists": True, "mode": mode, "entries": entries}


def _entry(dfd, name, want_size, cache):
    """[type, size, mode, sha256 or link target or None] of name in dfd, never followed."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if stat.S_ISLNK(st.st_mode):
        return ["l", 0, mode, os.readlink(name, dir_fd=dfd)]
    if stat.S_ISDIR(st.st_mode):
        return ["d", 0, mode, None]
    if stat.S_ISREG(st.st_mode):
        # only a file the caller has at this very size can be equal: the others are not read
        sha = cache.sha256_at(dfd, name) if want_size == st.st_size else None
        return ["f", st.st_size, mode, sha]
    return ["o", 0, mode, None]


def _list(dfd, rel, want, cache, out):
    for name in sorted(os.listdir(dfd)):
        r = rel + "/" + name if rel else name
        if is_temp(name):
            if _stale(dfd, name):
                out[r] = ["t", 0, 0, None]  # left by an agent killed mid-file: the push removes it
            continue
        ent = _entry(dfd, name, want.get(r), cache)
        if ent is None:
            continue  # gone since the listing
        out[r] = ent
        if ent[0] == "d":
            try:
                sub = os.open(name, DIR_FLAGS, dir_fd=dfd)
            except OSError:
                continue  # replaced since the listing
            try:
                _list(sub, r, want, cache, out)
            finally:
                os.close(sub)


# --- push: what differs, written ---------------------------------------------------------------

def push(req, home, emit, stdin):
    """Apply req["items"] in order under req["roots"]: directories ("d"), files ("f", their
    bytes then their sha256 line on stdin, in item order), links ("l"), deletions ("x",
    deepest first). "keep" names the files the caller found unchanged (recorded as deployed
    with the rest)."""
    roots, cache = [], HashCache(home)
    try:
        for r in req.get("roots") or []:
            roots.append(_open_push_root(r, req, home))
        res = _apply(req, roots, cache, stdin)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            raise AgentFailure("DiskFull", "disk full on %s: %s" % (os.uname().nodename, e.strerror),
                               "free space on the target, then push again")
        raise _os_failure(e, "push failed")
    finally:
        for _, dirs, _ in roots:
            dirs.close()
        cache.save()
    gone = [d["remote"] for d in res.get("deleted") or []]
    if req.get("run"):
        _record_deployed(RunStore(home, req["run"]), res["files"] + [
            {"remote": _dest(roots[i][0], rel), "sha256": sha} for i, rel, sha in req.get("keep") or []], gone)
    if res["files"] or gone:  # (a dry run never reaches the far side's push)
        _update_others(home, req.get("run"), res["files"], gone)
    res.update(verified=["sha256_on_target"], host=os.uname().nodename, in_container=in_container())
    return res


def _open_push_root(r, req, home):
    """(path, DirCache, leaf name or None) for one root. A file root's DirCache holds its
    directory, and its leaf is the file's name there."""
    path = _full(r["remote"])
    if not r.get("tree"):
        d, name = os.path.split(path.rstrip("/"))
        return path, DirCache(open_root(d, create=True)), name
    fd = open_root(path, create=True)
    if req.get("delete"):
        _refuse_delete(fd, path, home)
    return path, DirCache(fd), None


def _refuse_delete(fd, path, home):
    """--delete into /, a home directory, or a directory that holds runward's own state:
    refused, on the directory reached (device and inode), whatever path named it, before
    anything is listed or removed. Deleting the home's records (or a live run's log) would
    leave a job that `stop` no longer knows: running on, unstoppable."""
    if any(same_dir(fd, p) for p in ("/", os.path.expanduser("~"))):
        why = "it is / or a home directory"
    else:
        why = _holds_state(fd, home)
    if why:
        os.close(fd)
        raise bad_input("--delete refused for %s: %s" % (path, why),
                        "push into a directory of its own (e.g. ~/work/NAME) to use --delete; "
                        "a run's --log outside it")


def _holds_state(fd, home):
    """Why the directory fd must not be pushed into with --delete, or None: it is the home
    or inside it (the records), or it contains the home or a live run's log (and its
    rotations, beside it)."""
    st = os.fstat(fd)
    here = (st.st_dev, st.st_ino)
    if here in _chain(home.path) or _inside(fd, home.path):
        return "it holds runward's state (%s)" % home.path
    for name, log in _live_logs(home):
        if here in _chain(log):
            return "it holds the log of the live run %s (%s and its rotations)" % (name, log)
    return None


def _chain(path):
    """(device, inode) of path's directory and of each directory above it, links resolved."""
    p, out = os.path.realpath(path), set()
    while True:
        try:
            st = os.stat(p)
            out.add((st.st_dev, st.st_ino))
        except OSError:
            pass  # not there (yet): what is above it still counts
        up = os.path.dirname(p)
        if up == p:
            return out
        p = up


def _inside(fd, path):
    """Whether the directory fd is path or below it, walked up by ".." from fd itself."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    want, cur = (st.st_dev, st.st_ino), os.dup(fd)
    try:
        for _ in range(256):
            a = os.fstat(cur)
            if (a.st_dev, a.st_ino) == want:
                return True
            up = os.open("..", DIR_FLAGS, dir_fd=cur)
            b = os.fstat(up)
            os.close(cur)
            cur = up
            if (b.st_dev, b.st_ino) == (a.st_dev, a.st_ino):
                return False  # reached /
        return False
    finally:
        os.close(cur)


def _live_logs(home):
    """(run, log path) of every run here whose latest attempt may still have a process: its
    shim or job alive, or lost on this boot (its children may live on)."""
    from ..core.procfs import alive_in
    from ..proc.runs import attempt_state, own_procs, this_boot
    for name in home.run_names():
        att = RunStore(home, name).latest()
        if not att or not att.get("log"):
            continue
        procs = own_procs(att)
        state = attempt_state(att, procs, this_boot())
        shim = att.get("shim")
        if (shim and alive_in(procs, shim)) or state in ("running", "orphaned", "starting") or (
                state == "lost" and att.get("boot_id") == this_boot()):
            yield name, att["log"]


def _dest(path, rel):
    return path.rstrip("/") + "/" + rel if rel else path


def _apply(req, roots, cache, stdin):
    out = {"files": [], "links": [], "deleted": []}
    batch = Batch(cache, out["files"], roots)
    modes = []
    try:
        for it in req.get("items") or []:
            _apply_one(it, req, roots, batch, modes, out, stdin)
        batch.commit(last=True)
    finally:
        batch.abandon()
    for i, rel, mode in reversed(modes):  # set last: a 0555 directory must take its files first
        os.fchmod(roots[i][1].get(rel), mode & 0o7777)
    return out


def _apply_one(it, req, roots, batch, modes, out, stdin):
    path, dirs, leaf = roots[it["i"]]
    rel, t = it["rel"], it["t"]
    parent, _, name = rel.rpartition("/")
    if t == "d":
        dirs.get(rel)
        modes.append((it["i"], rel, it["mode"]))
    elif t == "x" and it.get("type") == "temp":
        dfd = dirs.get(parent, create=False)
        if dfd is not None and is_temp(name) and _stale(dfd, name) and _remove(dfd, name):
            out.setdefault("temps_removed", []).append(_dest(path, rel))
    elif t == "x":
        if not req.get("delete") or leaf is not None or not rel:
            raise bad_input("a deletion outside a pushed directory: %r" % rel, "this is a bug in the caller")
        dfd = dirs.get(parent, create=False)
        if dfd is not None and _remove(dfd, name):
            out["deleted"].append({"remote": _dest(path, rel), "type": it.get("type"), "size": it.get("size", 0)})
    else:
        dfd = dirs.get(parent)
        name = leaf if leaf is not None else name
        shown = path if leaf is not None else _dest(path, rel)
        if t == "f":
            batch.add(_receive(dfd, name, it, stdin, shown))
        else:
            _link(dfd, name, it["target"])
            out["links"].append({"remote": shown, "target": it["target"]})


class Batch(object):
    """Files written to their temp names, waiting to be renamed into place: until its rename
    each destination keeps its old bytes, so a push cut anywhere leaves every file old or
    new, never torn. A large file is fsynced before its rename (then even a power loss leaves
    it old or new); small files are renamed without, and one syncfs(2) at the end of the push
    makes them durable before the reply says so: an fsync per file, or a syncfs per batch,
    cost a push of 2,000 small files over a second (each one waits on the journal)."""

    MAX_FILES, MAX_BYTES, BIG = 256, 64 << 20, 8 << 20

    def __init__(self, cache, done, roots):
        self.cache, self.done, self.roots = cache, done, roots
        self.pending, self.bytes, self.to_sync = [], 0, {}  # device -> a descriptor on it

    def add(self, w):
        if w["size"] >= self.BIG:
            os.fsync(w["fd"])
        self.pending.append(w)
        self.bytes += w["size"]
        if len(self.pending) >= self.MAX_FILES or self.bytes >= self.MAX_BYTES:
            self.commit()

    def commit(self, last=False):
        while self.pending:
            w = self.pending[0]
            dev = os.fstat(w["fd"]).st_dev
            if w["size"] < self.BIG and dev not in self.to_sync:
                self.to_sync[dev] = os.dup(w["dfd"])
            self.pending.pop(0)  # _commit_one closes its descriptor, whatever happens
            self.done.append(_commit_one(w, self.cache))
        self.bytes = 0
        if last:
            _sync(list(self.to_sync.values()))
        for _, dirs, _ in self.roots:
            dirs.trim()  # the directory descriptors stay few, however large the tree

    def abandon(self):
        """A push that failed or was cut: its temp files go, the destinations stay as they were."""
        for w in self.pending:
            os.close(w["fd"])
            try:
                os.unlink(w["tmp"], dir_fd=w["dfd"])
            except OSError:
                pass
        self.pending = []
        for fd in self.to_sync.values():
            os.close(fd)
        self.to_sync = {}


_SYNCFS = []


def _sync(fds):
    """syncfs(2) on each filesystem written (through ctypes: os has no syncfs), else os.sync."""
    if not fds:
        return
    if not _SYNCFS:  # looked up once per agent process
        try:
            import ctypes
            _SYNCFS.append(ctypes.CDLL(None, use_errno=True).syncfs)
        except (ImportError, OSError, AttributeError):
            _SYNCFS.append(None)
    for fd in fds:
        if _SYNCFS[0] is None or _SYNCFS[0](fd) != 0:
            os.sync()
            return


def _remove(dfd, name):
    """Remove name from dfd: a file or a link (never what it points to), or an empty
    directory (the caller removes its contents first). False when already gone."""
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    try:
        if stat.S_ISDIR(st.st_mode):
            os.rmdir(name, dir_fd=dfd)
        else:
            os.unlink(name, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ENOTEMPTY:
            return False  # something new appeared in it since the manifest: left alone
        raise
    return True


def _link(dfd, name, target):
    for _ in range(100):
        tmp = ".%s%s%s" % (name, TEMP_MARK, os.urandom(8).hex())
        try:
            os.symlink(target, tmp, dir_fd=dfd)
            break
        except FileExistsError:
            continue
    os.rename(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)


def _receive(dfd, name, it, stdin, shown):
    """One file's bytes from stdin into a new temp file in dfd, its sha256 line checked,
    mode and mtime set; renamed later, by the batch."""
    import hashlib
    fd, tmp = _create_temp_at(dfd, name)
    try:
        h = hashlib.sha256()
        for chunk in read_exact(stdin, int(it["size"]), h):
            write_all(fd, chunk, shown)
        sent = stdin.read(65).decode("ascii", "replace").strip()
        got = h.hexdigest()
        if sent != got:
            raise AgentFailure("Failed", "sha256 mismatch for %s: sent %s, received %s" % (shown, sent[:16], got[:16]),
                               "the bytes changed in transit or the local file changed while being read; push again")
        os.fchmod(fd, int(it.get("mode", 0o644)) & 0o7777)
        if it.get("mtime_ns"):
            os.utime(fd, ns=(time.time_ns(), int(it["mtime_ns"])))
    except BaseException:
        os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise
    return {"fd": fd, "tmp": tmp, "dfd": dfd, "name": name, "shown": shown, "sha256": got,
            "size": int(it["size"]), "mode": int(it.get("mode", 0o644))}


def _commit_one(w, cache):
    """Read back (the bytes on disk must hash as received), rename into place, and the name
    must then be that very file (device and inode): the directory may be others' (a sticky
    /tmp), where a name can be swapped between our rename and our check."""
    fd, dfd, name, shown = w["fd"], w["dfd"], w["name"], w["shown"]
    renamed = False
    try:
        if sha256_fd(fd) != w["sha256"]:
            raise AgentFailure("Failed", "%s reads back with another sha256 than was written" % shown, "check the disk")
        try:
            os.rename(w["tmp"], name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as e:
            if e.errno in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise AgentFailure("Failed", "%s is a directory there; the source has a file" % shown,
                                   "remove the directory on the target, or push with --delete from its parent")
            raise
        renamed = True
        cache.put(_check_same_file_at(fd, dfd, name, shown), w["sha256"], trusted=True)
    finally:
        os.close(fd)
        if not renamed:
            try:
                os.unlink(w["tmp"], dir_fd=dfd)
            except OSError:
                pass
    return {"remote": shown, "sha256": w["sha256"], "size": w["size"], "mode": oct(w["mode"])}


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


def _create_temp_at(dfd, base):
    """(fd, name) of a new temp file in dfd, 0600, open for writing and reading back. The
    name is random (a pid is guessed: links were planted under the next pids' names) and
    O_EXCL with O_NOFOLLOW refuses any name already there, a symlink included."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = ".%s%s%s" % (base, TEMP_MARK, os.urandom(8).hex())
        try:
            return os.open(tmp, flags, 0o600, dir_fd=dfd), tmp
        except FileExistsError:
            continue
    raise AgentFailure("Failed", "could not create a temp file beside %s: 100 random names were taken" % base,
                       "look at what fills its directory")


def _check_same_file_at(fd, dfd, name, shown):
    """The name must now be the file we wrote and hashed: in a directory others can write,
    it could have been swapped between our rename and now. Its stat, after the rename."""
    st, got = os.fstat(fd), None
    try:
        got = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except OSError:
        pass
    if got is None or (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
        raise AgentFailure("Failed", "%s is not the file written: it was replaced after the rename; "
                           "the push is not verified" % shown,
                           "someone else writes in its directory; push into a directory of your own")
    return got


def _record_deployed(store, done, deleted=()):
    """deployed.json: the sha256 of what deploy wrote or found unchanged, for status; what
    --delete removed is no longer deployed (else status calls it drift forever)."""
    store.home.ensure()
    try:
        os.mkdir(store.dir, 0o700)
    except FileExistsError:
        pass
    dep = read_json(os.path.join(store.dir, "deployed.json"), {}) or {}
    for f in done:
        if f.get("sha256"):
            dep[f["remote"]] = {"sha256": f["sha256"], "at": time.time()}
    for remote in deleted:
        dep.pop(remote, None)
    write_json(os.path.join(store.dir, "deployed.json"), dep)


def _update_others(home, run, written, gone):
    """A push (or another run's deploy) that rewrote or removed a file some run's deploy
    recorded: that record follows (only paths it already holds), else status kept calling a
    file removed by `push --delete` "still deployed", and restart refused over it."""
    new = dict((f["remote"], f["sha256"]) for f in written if f.get("sha256"))
    for name in home.run_names():
        if name == run:
            continue
        path = os.path.join(RunStore(home, name).dir, "deployed.json")
        dep = read_json(path, {}) or {}
        hit = [r for r in list(new) + list(gone) if r in dep]
        if not hit:
            continue
        for r in hit:
            if r in new:
                dep[r] = {"sha256": new[r], "at": time.time()}
            else:
                dep.pop(r, None)
        write_json(path, dep)
