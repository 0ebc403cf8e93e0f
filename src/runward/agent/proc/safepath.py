"""Directories opened one component at a time, each relative to its parent's descriptor
(openat with O_NOFOLLOW), so that a push never writes through a symbolic link someone else
planted anywhere along its destination path, not only at its last name.

A symlink on the way to a destination root is followed only where it sits in a directory
that nobody but root or us can write (then only root or we could have put it there: a
deliberate link such as ~/work -> /scratch/work). Below the root, inside the pushed tree,
no link is ever followed: what the source has as a directory replaces a link there.
"""

import errno
import os
import stat

from ..core.wire import AgentFailure

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # as the kernel's own limit on links followed in one lookup (ELOOP)


def safe_dir(fd):
    """Only root or we can create or replace names in the directory fd."""
    st = os.fstat(fd)
    return st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022


def _refuse_link(shown):
    return AgentFailure("Failed", "%s is a symbolic link in a directory that others can write or that is not "
                        "ours: not pushing through it" % shown,
                        "remove the link, or push into a directory of your own")


def open_root(path, create=False, mode=0o755):
    """A descriptor of the directory path, walked from / (see the module's doc). Missing
    components are made when create, else None is returned. Raises AgentFailure for a link
    that is not safe to follow, or a component that is not a directory."""
    if not os.path.isabs(path):
        path = os.path.join(os.path.expanduser("~"), path)
    todo = [c for c in path.split("/") if c and c != "."]
    todo.reverse()  # a stack: the next component last
    fd, shown, links = os.open("/", DIR_FLAGS), "", 0
    try:
        while todo:
            name = todo.pop()
            try:
                nfd = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if e.errno == errno.ENOENT and not create:
                    os.close(fd)
                    return None
                if e.errno == errno.ENOENT:
                    _mkdir(fd, name, mode)
                    todo.append(name)
                    continue
                if e.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if not stat.S_ISLNK(st.st_mode):
                    raise AgentFailure("Failed", "%s/%s is not a directory" % (shown, name),
                                       "push to a directory path, or remove what is there")
                links += 1
                if links > MAX_LINKS or not safe_dir(fd):
                    raise _refuse_link("%s/%s" % (shown, name)) if links <= MAX_LINKS else AgentFailure(
                        "Failed", "too many symbolic links under %s" % path, "check the destination path")
                target = os.readlink(name, dir_fd=fd)
                todo.extend(reversed([c for c in target.split("/") if c and c != "."]))
                if target.startswith("/"):
                    os.close(fd)
                    fd, shown = os.open("/", DIR_FLAGS), ""
                continue
            os.close(fd)
            fd = nfd
            shown = shown.rsplit("/", 1)[0] if name == ".." else shown + "/" + name
        return fd
    except BaseException:
        os.close(fd)
        raise


def _mkdir(fd, name, mode):
    try:
        os.mkdir(name, mode, dir_fd=fd)
    except FileExistsError:
        pass  # made by another push at the same time


def open_sub(fd, name, create=True, mode=0o755):
    """The subdirectory name of fd, never through a link: a link or file at that name is
    replaced by a new directory when create (the source has a directory there), else None."""
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        if e.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR) or not create:
            if create:
                raise
            return None
        missing = e.errno == errno.ENOENT
    if not missing:
        os.unlink(name, dir_fd=fd)  # the link itself, never what it points to
    _mkdir(fd, name, mode)
    return os.open(name, DIR_FLAGS, dir_fd=fd)


def same_dir(fd, path):
    """Whether the directory fd is path (compared by device and inode, links resolved)."""
    try:
        a, b = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


class DirCache(object):
    """Descriptors of the directories under one root, by path relative to it ("" = root),
    each opened from its parent's with open_sub; closed together."""

    def __init__(self, root_fd):
        self.fds = {"": root_fd}

    def get(self, rel, create=True, modes=None):
        if rel in self.fds:
            return self.fds[rel]
        parent, _, name = rel.rpartition("/")
        pfd = self.get(parent, create, modes)
        if pfd is None:
            return None
        fd = open_sub(pfd, name, create, (modes or {}).get(rel, 0o755))
        if fd is not None:
            self.fds[rel] = fd
        return fd

    def trim(self):
        """Close all but the root's (reopened when asked for again)."""
        for rel, fd in list(self.fds.items()):
            if rel:
                os.close(self.fds.pop(rel))

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
