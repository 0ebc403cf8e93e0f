"""The text of an attempt's files, kept beside the run's records so that compare can show a
unified diff of what changed between two attempts (docs/history.md).

At each start, every file whose sha256 the attempt records (the script, --hash-files) that is
text (UTF-8, no NUL) and small is copied to <run dir>/snapshots/<sha256>: by content, so an
unchanged file costs nothing more per attempt. Bounded: FILE_MAX per file, ATTEMPT_MAX per
attempt, the files of the last KEEP_ATTEMPTS attempts (older ones' text removed as the next
start writes its own); rm and prune remove it with the run's directory. A file that holds the
value of one of the run's secret env entries is never kept. Keeping is best effort: a file it
cannot keep is named with the reason, and a start never fails on it."""

import hashlib
import os

from .secrets import is_secret_name
from .store import make_private_dirs, write_atomic

FILE_MAX = 256 << 10
ATTEMPT_MAX = 2 << 20
KEEP_ATTEMPTS = 20
SECRET_MIN = 4  # a secret value shorter than this would match by chance: such a value is not searched


def keep(store, hashes, env):
    """{"kept": {path: sha256}, "skipped": {path: reason}} for the attempt's files HASHES."""
    secrets = [v.encode() for k, v in (env or {}).items()
               if is_secret_name(k) and isinstance(v, str) and len(v) >= SECRET_MIN]
    kept, skipped, total = {}, {}, 0
    d = os.path.join(store.dir, "snapshots")
    for path, sha in sorted((hashes or {}).items()):
        try:
            data = _text(path, sha, secrets, ATTEMPT_MAX - total)
            if not isinstance(data, bytes):
                skipped[path] = data
                continue
            make_private_dirs(d)
            blob = os.path.join(d, sha)
            if not os.path.exists(blob):
                write_atomic(blob, data, sync=False)  # a lost copy costs a diff, never a record
            kept[path] = sha
            total += len(data)
        except OSError as e:
            skipped[path] = "not kept: %s" % (e.strerror or e)
    _forget_old(store, d, kept)
    return {"kept": kept, "skipped": skipped}


def _text(path, sha, secrets, room):
    """The file's bytes, or why they are not kept."""
    if not sha:
        return "no hash (the file was missing at start)"
    size = os.path.getsize(path)
    if size > FILE_MAX:
        return "larger than %d KiB" % (FILE_MAX >> 10)
    if size > room:
        return "over the %d MiB kept per attempt" % (ATTEMPT_MAX >> 20)
    with open(path, "rb") as f:
        data = f.read(FILE_MAX + 1)
    if hashlib.sha256(data).hexdigest() != sha:
        return "changed since it was hashed"
    if b"\0" in data:
        return "binary"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary (not UTF-8)"
    if any(s in data for s in secrets):
        return "holds the value of a secret env entry"
    return data


def _forget_old(store, d, kept):
    """Remove the text no attempt among the last KEEP_ATTEMPTS (this one included) kept."""
    try:
        blobs = os.listdir(d)
    except FileNotFoundError:
        return
    wanted = set(kept.values())
    for n in store.attempts()[-(KEEP_ATTEMPTS - 1):]:
        wanted.update(((store.attempt(n) or {}).get("snapshots") or {}).get("kept", {}).values())
    for b in blobs:
        if b not in wanted and not b.startswith("."):
            try:
                os.unlink(os.path.join(d, b))
            except OSError:
                pass


def text_of(store, att, path):
    """The kept text of PATH as attempt ATT ran it, or None."""
    sha = ((att.get("snapshots") or {}).get("kept") or {}).get(path)
    if not sha or "/" in sha:
        return None
    try:
        with open(os.path.join(store.dir, "snapshots", sha), "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return None
