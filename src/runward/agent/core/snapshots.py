"""The text of an attempt's files, kept beside the run's records so that compare can show a
unified diff of what changed between two attempts (docs/history.md).

At each start, every file whose sha256 the attempt records (the script, --hash-files) that is
text (UTF-8, no NUL) and small is copied to <run dir>/snapshots/<sha256>: by content, so an
unchanged file costs nothing more per attempt. Bounded: FILE_MAX per file, ATTEMPT_MAX per
attempt, the files of the last KEEP_ATTEMPTS attempts (older ones' text removed as the next
start writes its own); runward.toml's snapshots = {...} (runward/spec/snapbounds.py) sets them
per run, and the attempt's record says the bounds it was kept under; rm and prune remove it
with the run's directory. A file that holds a secret runward knows of (the value of a
secret-named env entry, the password of a URL in any env value or in a notify entry) is
never kept, and a URL password in a kept file's own text is kept as ***. Keeping is best
effort: a file it cannot keep is named with the reason, and a start never fails on it."""

import hashlib
import os

from .secrets import is_secret_name, mask_url_passwords, url_passwords
from .store import make_private_dirs, write_atomic

FILE_MAX = 256 << 10
ATTEMPT_MAX = 2 << 20
KEEP_ATTEMPTS = 20
SECRET_MIN = 4  # a secret value shorter than this would match by chance: such a value is not searched


def keep(store, hashes, env, bounds=None, notify=None):
    """{"kept": {path: sha256}, "skipped": {path: reason}, "bounds": {...}} for the attempt's
    files HASHES, under BOUNDS ({file_max, attempt_max, keep_attempts}; the defaults else);
    NOTIFY: the policy's real notify entries, whose URL passwords no kept file may hold."""
    b = {"file_max": FILE_MAX, "attempt_max": ATTEMPT_MAX, "keep_attempts": KEEP_ATTEMPTS}
    b.update({k: int(v) for k, v in (bounds or {}).items() if k in b and isinstance(v, int) and v > 0})
    secrets = _secret_values(store, env, notify)
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
            # a lost copy costs a diff, never a record; a masked text is written again over an
            # older runward's copy, which kept its URL passwords
            if not os.path.exists(blob) or hashlib.sha256(data).hexdigest() != sha:
                write_atomic(blob, data, sync=False)
            kept[path] = sha
            total += len(data)
        except OSError as e:
            skipped[path] = "not kept: %s" % (e.strerror or e)
    _forget_old(store, d, kept, b["keep_attempts"])
    return {"kept": kept, "skipped": skipped, "bounds": b}


def _secret_values(store, env, notify=None):
    """{value: why} of the secrets a kept file may not hold: the run's secret-named env
    entries' values and the passwords of URLs in any env value -- this start's, and those the
    earlier attempts' records keep (a rotated secret's old value, still in a file, would else
    be kept and shown by compare's diff) -- and the notify URLs' passwords."""
    envs = [env or {}]
    for n in store.attempts():
        envs.append((store.attempt(n) or {}).get("env") or {})
    found = {}
    for e in envs:
        for k, v in e.items():
            if isinstance(v, str):
                _add(found, url_passwords(v), "holds the password of a URL in env entry %s" % k)
                _add(found, [v] if is_secret_name(k) else [], "holds the value of a secret env entry")
    for t in notify or []:
        _add(found, url_passwords(t), "holds the password of a notify URL")
    return found


def _add(found, values, why):
    for v in values:
        if len(v) >= SECRET_MIN:
            found[v.encode()] = why


def _text(path, sha, secrets, b, room):
    """The file's bytes as kept (its URLs' passwords masked), or why they are not kept."""
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
    for s, why in sorted(secrets.items()):
        if s in data:
            return why
    return mask_url_passwords(data.decode("utf-8")).encode("utf-8")


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
