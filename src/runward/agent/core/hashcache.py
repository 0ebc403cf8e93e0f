"""sha256 of files, remembered by (device, inode, size, mtime_ns, ctime_ns) in the home's
cache, so that asking again about an unchanged tree (a redeploy, status's drift) reads
nothing but the inodes.

An entry is kept only for a file last modified more than RACY_S before it was hashed: a
write in the same timestamp tick as our read would leave size and mtime as they were
(git's "racily clean" problem), and such a file is simply hashed again next time. The
ctime is in the key because `touch -d` can put an mtime back, never a ctime.
"""

import hashlib
import os
import stat
import time

from .store import read_json, remove_file, write_all
from .wire import AgentFailure, json_dumps

RACY_S = 2.0
KEEP = 20000  # entries kept, most recently used first: the file (~120 bytes each) is read on every call


def key(st):
    return "%d:%d" % (st.st_dev, st.st_ino)


def sig(st):
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns]


class HashCache(object):
    def __init__(self, home):
        self.path = os.path.join(home.path, "cache", "hashes.json") if home is not None else None
        try:
            self.entries = (read_json(self.path, {}) or {}) if self.path else {}
        except AgentFailure:
            self.entries = {}  # a torn or hand-edited cache is only a cache: start again
        self.dirty = False

    def get(self, st):
        e = self.entries.get(key(st))
        if e and e[:3] == sig(st):
            e[4] = int(time.time())
            return e[3]
        return None

    def put(self, st, sha, trusted=False):
        """trusted: the bytes are ours, just written and read back through our descriptor."""
        if trusted or time.time() - st.st_mtime_ns / 1e9 > RACY_S:
            self.entries[key(st)] = sig(st) + [sha, int(time.time())]
            self.dirty = True

    def sha256_at(self, dir_fd, name, follow=False):
        """The sha256 of the file name in dir_fd, through a link only when follow; None when
        it is gone or cannot be read."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW), dir_fd=dir_fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            got = self.get(st)
            if got is None:
                got = sha256_fd(fd)
                if sig(os.fstat(fd)) == sig(st):  # not written while we read it
                    self.put(st, got)
            return got
        finally:
            os.close(fd)

    def sha256_path(self, path):
        """As the start hashed it (store.file_hashes): a link is followed."""
        d, name = os.path.split(path)
        try:
            fd = os.open(d or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            return self.sha256_at(fd, name, follow=True)
        finally:
            os.close(fd)

    def save(self):
        if not self.dirty or not self.path:
            return
        if len(self.entries) > KEEP:
            newest = sorted(self.entries.items(), key=lambda kv: -kv[1][4])[:KEEP]
            self.entries = dict(newest)
        tmp = "%s.%d" % (self.path, os.getpid())
        try:
            os.makedirs(os.path.dirname(self.path), 0o700, exist_ok=True)
            # renamed, not fsynced: a reader sees the old cache or the new one, and a cache
            # lost to a power cut costs one re-read, while an fsync here costs every push
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                write_all(fd, json_dumps(self.entries).encode(), self.path)
            finally:
                os.close(fd)
            os.rename(tmp, self.path)
        except (OSError, AgentFailure):
            remove_file(tmp)  # a cache: a full disk or a read-only home costs a re-read next time, nothing else
        self.dirty = False


def sha256_fd(fd):
    h = hashlib.sha256()
    pos = 0
    while True:
        chunk = os.pread(fd, 1 << 20, pos)
        if not chunk:
            return h.hexdigest()
        h.update(chunk)
        pos += len(chunk)
