"""push and hash: files written through the hop chain, so they land in the filesystem the
job sees; atomic (temp, fsync, rename) and checked by sha256 here."""

import os
import time

from ..procfs import in_container
from ..store import RunStore, file_hashes, read_json, sha256_file, write_json
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
    fsync, sha256 checked against the sender's, then renamed into place (atomic), mode kept."""
    done = []
    for ent in req.get("files") or []:
        dest = os.path.expanduser(ent["remote"])
        if not os.path.isabs(dest):
            dest = os.path.join(os.path.expanduser("~"), dest)
        if ent.get("type") == "dir":
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
    """One file's bytes from stdin to dest, then its sha256 line; checked, renamed, read back."""
    import hashlib
    d = os.path.dirname(dest)
    if not os.path.isdir(d):
        os.makedirs(d)
    tmp = os.path.join(d, ".%s.runward-tmp.%d" % (os.path.basename(dest), os.getpid()))
    h = hashlib.sha256()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in read_exact(stdin, int(ent["size"]), h):
            os.write(fd, chunk)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    sent = stdin.read(65).decode("ascii", "replace").strip()
    got = h.hexdigest()
    if sent != got:
        os.unlink(tmp)
        raise AgentFailure("Failed", "sha256 mismatch for %s: sent %s, received %s" % (dest, sent[:16], got[:16]),
                           "the bytes changed in transit or the local file changed while being read; push again")
    os.chmod(tmp, int(ent.get("mode", 0o644)) & 0o7777)
    os.rename(tmp, dest)
    # verify what is now at the destination, read back from the filesystem the job sees
    on_disk = sha256_file(dest)
    if on_disk != got:
        raise AgentFailure("Failed", "%s reads back with another sha256 after rename" % dest, "check the disk")
    return {"remote": dest, "sha256": on_disk, "size": int(ent["size"]), "mode": oct(ent.get("mode", 0o644))}


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
