"""The text of an attempt's files, kept beside the run's records so that compare can show a
unified diff of what changed between two attempts (docs/history.md).

At each start, every file whose sha256 the attempt records (the script, --hash-files) that is
text (UTF-8, no NUL) and small is copied to <run dir>/snapshots/<sha256>: by content, so an
unchanged file costs nothing more per attempt. Bounded: FILE_MAX per file, ATTEMPT_MAX per
attempt, the files of the last KEEP_ATTEMPTS attempts (older ones' text removed as the next
start writes its own); runward.toml's snapshots = {...} (runward/snapbounds.py) sets them
per run, and the attempt's record says the bounds it was kept under; rm and prune remove it
with the run's directory. A file that holds the
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


def keep(store, hashes, env, bounds=None):
    """{"kept": {path: sha256}, "skipped": {path: reason}, "bounds": {...}} for the attempt's
    files HASHES, under BOUNDS ({file_max, attempt_max, keep_attempts}; the defaults else)."""
    b = {"file_max": FILE_MAX, "attempt_max": ATTEMPT_MAX, "keep_attempts": KEEP_ATTEMPTS}
    b.update({k: int(v) for k, v in (bounds or {}).items() if k in b and isinstance(v, int) and v > 0})
    secrets = _secret_values(store, env)
    kept, skipped, total = {}, {}, 0
    d = os.path.join(store.dir, "snapshots")
    for path, sha in sorted((hashes or {}).items()):
        try:
            data = _text(path, sha, secrets, b, b["attempt_max"] - total)
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
    _forget_old(store, d, kept, b["keep_attempts"])
    return {"kept": kept, "skipped": skipped, "bounds": b}


def _secret_values(store, env):
    """The values of the run's secret env entries: this start's, and those the earlier
    attempts' records keep -- a rotated secret's old value, still in a file, would else be kept
    and shown by compare's diff."""
    envs = [env or {}]
    for n in store.attempts():
        envs.append((store.attempt(n) or {}).get("env") or {})
    return sorted({v.encode() for e in envs for k, v in e.items()
                   if is_secret_name(k) and isinstance(v, str) and len(v) >= SECRET_MIN})


def _text(path, sha, secrets, b, room):
    """The file's bytes, or why they are not kept."""
    if not sha:
        return "no hash (the file was missing at start)"
    size = os.path.getsize(path)
    if size > b["file_max"]:
        return "larger than %s, the file_max" % _size(b["file_max"])
    if size > room:
        return "over the %s kept per attempt (attempt_max)" % _size(b["attempt_max"])
    with open(path, "rb") as f:
        data = f.read(b["file_max"] + 1)
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


def _size(n):
    if n >= 1 << 20 and not n % (1 << 20):
        return "%d MiB" % (n >> 20)
    return "%d KiB" % (n >> 10) if n >= 1024 else "%d B" % n


def _forget_old(store, d, kept, keep_attempts):
    """Remove the text no attempt among the last keep_attempts (this one included) kept."""
    try:
        blobs = os.listdir(d)
    except FileNotFoundError:
        return
    wanted = set(kept.values())
    for n in (store.attempts()[-(keep_attempts - 1):] if keep_attempts > 1 else []):
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
