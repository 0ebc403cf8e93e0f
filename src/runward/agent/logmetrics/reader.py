"""The log read from where the last call stopped: in chunks, complete lines only, a line
cut when it grows too long, and a rotated, truncated or rewritten log noticed; a log rotated
by size (LOG.1, LOG.2 ...) followed into the file the last call was reading."""

import os

CHUNK = 1 << 20  # bytes per read
MAX_BYTES = 64 << 20  # default cap on bytes parsed per call (rules["max_bytes"])
CARRY_MAX = 64 << 10  # a line longer than this is cut there; the rest of it is skipped
SIG_BYTES = 64  # bytes before the offset remembered to notice a log rewritten in place
ROTATED_MAX = 1000  # LOG.N looked for at most (log_keep is far below)


class Cursor(object):
    """Where the last call stopped reading, kept in the scan's state between calls."""

    def __init__(self, state):
        self.offset = int(state.get("offset", 0))
        self.carry = state.get("carry", "").encode("latin-1")  # an unfinished line
        self.skip_long = bool(state.get("skip_long", False))  # the rest of a cut line
        self.sig = state.get("sig", "")  # hex of the bytes before the offset
        self.ident = (state.get("ino"), state.get("dev"))

    def restart(self):
        self.offset, self.carry, self.skip_long = 0, b"", False

    def state(self):
        return {"offset": self.offset, "carry": self.carry.decode("latin-1"),
                "skip_long": self.skip_long, "sig": self.sig, "ino": self.ident[0],
                "dev": self.ident[1]}


def changed(f, st, cursor):
    """Why the open log F (its fstat ST) cannot be read on from CURSOR: "rotated",
    "truncated", "rewritten"; or None."""
    if cursor.ident[0] is not None and cursor.ident != (st.st_ino, st.st_dev):
        return "rotated"  # another file under the name (logrotate, re-created)
    if st.st_size < cursor.offset:
        return "truncated"
    if cursor.sig and cursor.offset:
        # Same file, not shorter: are the bytes before our offset still the ones we read?
        # (copytruncate, or `> log` and a rewrite, would pass the size test.)
        n = len(cursor.sig) // 2
        f.seek(cursor.offset - n)
        if f.read(n).hex() != cursor.sig:
            return "rewritten"
    return None


def read_new(f, cursor, max_bytes, feed):
    """Read F from its position, up to MAX_BYTES, handing complete lines to FEED (feed(),
    feed_redraws()); CURSOR keeps the unfinished line. Returns the bytes read."""
    read = 0
    carry, skip_long = cursor.carry, cursor.skip_long
    while read < max_bytes:
        data = f.read(min(CHUNK, max_bytes - read))
        if not data:
            break
        read += len(data)
        if skip_long:  # the rest of a line already cut at CARRY_MAX
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl + 1:]
            skip_long = False
        buf = carry + data if carry else data
        nl = buf.rfind(b"\n")
        if nl < 0:
            carry = buf
        else:
            carry = buf[nl + 1:]
            feed.feed(buf[: nl + 1])
        cr = carry.rfind(b"\r")
        if cr >= 0:
            # A progress bar redrawn in place (tqdm, Lightning) ends its line only when the
            # epoch ends: its finished redraws are read now, not 64 KiB on.
            feed.feed_redraws(carry[:cr])
            carry = carry[cr + 1:]
        if len(carry) > CARRY_MAX:
            feed.feed(carry[:CARRY_MAX] + b"\n")
            carry, skip_long = b"", True
    cursor.carry, cursor.skip_long = carry, skip_long
    return read


def signature(f, offset):
    """Hex of the bytes of F just before OFFSET (see changed)."""
    n = min(offset, SIG_BYTES)
    f.seek(offset - n)
    return f.read(n).hex()


def rotated(path):
    """The rotated files of the log PATH that exist, oldest first: PATH.N ... PATH.1 (the
    rotation by size, agent/supervise/logfiles.py). A rotation in progress leaves one name free for a
    moment (PATH.3 moved on to PATH.4, PATH.2 not yet to PATH.3): the names go on past it."""
    return [p for p, ident in _names(path)[1:] if ident is not None][::-1]


def _names(path):
    """[(name, (inode, device) or None)] of PATH, PATH.1, PATH.2 ..., newest first, up to two
    missing names in a row. A rotation renames the oldest first, one name at a time, so it
    leaves at most one free name, which a reader going up the names cannot see twice."""
    out, missing = [], 0
    for i in range(ROTATED_MAX + 1):
        p = "%s.%d" % (path, i) if i else path
        try:
            st = os.stat(p)
            ident = (st.st_ino, st.st_dev)
        except OSError:
            ident = None
        out.append((p, ident))
        missing = missing + 1 if ident is None and i else 0
        if missing == 2:
            break
    return out


CHAIN_TRIES = 20


def chain(path, cursor, from_oldest=False):
    """The files to read, in order, each open: the one CURSOR is in, under whatever name the
    rotations gave it since, each newer one, and PATH. A cursor's file that no name holds any
    more (rotated out of log_keep): PATH alone, or with FROM_OLDEST every rotated file still
    there. None when rotations moved the names during each of CHAIN_TRIES tries (a job
    filling log_max faster than we open files): the caller reads nothing this time and keeps
    its cursor, so a file is never skipped for a name read at the wrong moment."""
    for _ in range(CHAIN_TRIES):
        files = _chain_once(path, cursor, from_oldest)
        if files is not None:
            return files
    return None


def _chain_once(path, cursor, from_oldest):
    """chain's files from the names as they were at one moment, or None when they moved.

    The names are read, the files wanted opened, and the names read again: a name holds a
    file only once (files only move up, PATH -> PATH.1 -> PATH.2 ...), so a name that holds
    the same file both times held it all along, and when every name does, the first reading
    was the names at one moment, the one between the two readings. At any moment the files in
    name order, a free name skipped (a rename in progress) and a file under two names once
    (PATH linked as PATH.1 a moment before the new PATH comes), are the log in order."""
    names = _names(path)
    idents = [ident for _, ident in names]
    ident = cursor.ident
    if ident[0] is None:
        want = names[:1]
    elif ident in idents:
        want = names[:idents.index(ident) + 1]
    else:
        want = names if from_oldest else names[:1]
    files, seen = [], set()
    try:
        for p, want_ident in reversed(want):  # oldest first
            if want_ident is None or want_ident in seen:
                continue
            f = _open(p)
            if f is None:
                return _close(files)
            files.append(f)
            if _ident(f) != want_ident:
                return _close(files)
            seen.add(want_ident)
        if _names(path) != names:
            return _close(files)
        return files
    except BaseException:
        _close(files)
        raise


def _close(files):
    for f in files:
        f.close()
    return None


def _open(p):
    try:
        return open(p, "rb")
    except FileNotFoundError:
        return None


def _ident(f):
    st = os.fstat(f.fileno())
    return (st.st_ino, st.st_dev)
