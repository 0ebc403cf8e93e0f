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
    rotation by size, agent/logfiles.py)."""
    out = []
    for i in range(1, ROTATED_MAX + 1):
        p = "%s.%d" % (path, i)
        if not os.path.exists(p):
            break
        out.append(p)
    return out[::-1]


CHAIN_TRIES = 8


def chain(path, cursor, from_oldest=False):
    """The files to read, in order, each open: the one CURSOR is in, under its rotated name
    when PATH was rotated since (then each newer one after it), and PATH. The current log
    is opened first: a rotation in between then only moves it, and it is read all the same
    (its rotated name found again would be the same file, and is dropped). A rotation while
    the rotated names are being opened shifts every name by one: then the files are opened
    again, so none is missed. A cursor's file rotated out of reach: PATH alone, or with
    FROM_OLDEST every rotated file still there. After CHAIN_TRIES rotations in a row (a job
    filling log_max faster than we open files) the last files opened are read as they are."""
    for i in range(CHAIN_TRIES):
        files, stable = _chain_once(path, cursor, from_oldest)
        if stable or i == CHAIN_TRIES - 1:
            return files  # each open: the last try's are never closed here (they were, once)
        for f in files:
            f.close()


def _chain_once(path, cursor, from_oldest):
    """chain's files, and whether PATH is still the file opened first (no rotation came
    while the rotated names were opened)."""
    files = []
    cur = _open(path)
    if cur is not None:
        files.append(cur)
    ident = cursor.ident
    if ident[0] is None or (cur is not None and _ident(cur) == ident):
        return files, True
    older = []
    for p in reversed(rotated(path)):  # newest first, back to the cursor's file
        f = _open(p)
        if f is None:
            continue
        if any(_ident(g) == _ident(f) for g in files + older):
            f.close()
            continue
        older.append(f)
        if _ident(f) == ident:
            break
    found = any(_ident(f) == ident for f in older)
    stable = _same(path, cur)
    if found or from_oldest:
        return older[::-1] + files, stable
    for f in older:  # not found (rotated out of reach): read the current log anew
        f.close()
    return files, stable


def _same(path, f):
    """Whether PATH is still the file F (None: PATH did not exist)."""
    try:
        st = os.stat(path)
    except OSError:
        return f is None
    return f is not None and (st.st_ino, st.st_dev) == _ident(f)


def _open(p):
    try:
        return open(p, "rb")
    except FileNotFoundError:
        return None


def _ident(f):
    st = os.fstat(f.fileno())
    return (st.st_ino, st.st_dev)
