"""Filesystem: files copied to one filesystem and used in a container that has another.

host-path-in-container (docs/from-shell.md, "Copy the patched file, then run"): `scp run.sh root@host:/root/` and then
`ssh root@host "pct exec 200 -- /root/run.sh"` runs the container's own /root/run.sh.
"""

from __future__ import annotations

import posixpath
import re

from ..lexer import Word
from ..parse import Command, basename, getopt, getopt_permuted
from ..processes import CONTAINER_KINDS, LOOPBACK, Ctx
from ..report import command_text
from ..scan import Copy, Scan

SCP_WITH_ARG = {"-" + c for c in "cDFiJlMoPSX"}
RSYNC_WITH_ARG = {"-e", "--rsh", "-f", "--filter", "--exclude", "--include", "--exclude-from",
                  "--include-from", "--files-from", "-T", "--temp-dir", "--log-file",
                  "--chmod", "--port", "-B", "--block-size", "--partial-dir", "--rsync-path",
                  "-M", "--remote-option", "--bwlimit", "--timeout", "--compare-dest",
                  "--copy-dest", "--link-dest", "--backup-dir", "--suffix", "--max-size",
                  "--min-size", "--out-format", "--password-file", "--info", "--debug"}
CP_WITH_ARG = {"-t", "--target-directory", "-S", "--suffix"}


WHY_HOST_PATH = (
    "A container (pct/lxc, docker, podman) has its own root filesystem: /root inside it is "
    "not the host's /root. The job inside keeps running whatever file the container has at "
    "that path, the old code or none at all, and nothing says so (docs/from-shell.md, "
    "\"Copy the patched file, then run\"). "
    "Only a path bind-mounted into the container is shared.")


def copy_destination(name: str, words: list[Word]):
    """Where scp/rsync/cp/docker cp/pct push put files: (host or None, container hop or
    None, candidate paths as they could be spelled there). None when unknown."""
    if name in ("docker", "podman", "pct"):
        operands = [w.value for w in words[2:] if not w.value.startswith("-")]
        if name == "pct" and len(operands) >= 3:
            return None, ("pct", operands[0]), landed_paths([operands[1]], operands[2], None)
        if name != "pct" and len(operands) == 2 and ":" in operands[1]:
            container, _, path = operands[1].partition(":")
            return None, (name, container), landed_paths([operands[0]], path, None)
        return None
    table = {"scp": SCP_WITH_ARG, "rsync": RSYNC_WITH_ARG, "cp": CP_WITH_ARG}[name]
    if name == "scp":
        opts, k = getopt(words[1:], table)
        operands = words[1 + k:]
    else:
        opts, operands = getopt_permuted(words[1:], table)
    target_dir = next((v for f, v in opts if f in ("-t", "--target-directory")), None)
    values = [w.value for w in operands]
    if target_dir is not None:
        sources, dest = values, target_dir + "/"
    elif len(values) >= 2:
        sources, dest = values[:-1], values[-1]
    else:
        return None
    host, user, path = None, None, dest
    remote = re.match(r"^(?:([^@/:]+)@)?([^/:\[\]]+|\[[^\]]+\]):(?!:)(.*)$", dest)
    if remote and name != "cp":
        user, host_name, path = remote.groups()
        host = f"{user}@{host_name}" if user else host_name
    sources = [s.split(":", 1)[-1] if re.match(r"^[^/:]+:", s) else s for s in sources]
    return host, None, landed_paths(sources, path, user, remote=host is not None)


def landed_paths(sources: list[str], dest: str, user: str | None,
                 remote: bool = True) -> set[str]:
    d = dest or "~"
    if remote and not d.startswith(("/", "~")):
        d = "~/" + d  # scp/rsync paths without a leading / are relative to the home directory
    is_dir = d.endswith("/") or len(sources) > 1 or d in ("~", ".")
    base = d.rstrip("/") or "/"
    paths = set() if is_dir else {base}
    paths.update(f"{base}/{basename(s)}".replace("//", "/") for s in sources if basename(s))
    for p in list(paths):
        if p.startswith("~/"):
            paths.add("$HOME/" + p[2:])
            if user in (None, "root"):
                paths.add("/root/" + p[2:])
        elif p.startswith("/root/") and user in (None, "root"):
            paths.add("~/" + p[6:])
    return paths


def mentions(value: str, path: str) -> bool:
    return value == path or value.startswith(path + "/") or value.endswith("=" + path)


def inside_container(copy_domain: tuple, use_domain: tuple) -> bool:
    extra = use_domain[len(copy_domain):]
    return (len(use_domain) > len(copy_domain) and use_domain[:len(copy_domain)] == copy_domain
            and all(kind in CONTAINER_KINDS for kind, _ in extra))


def record_copy(scan: Scan, words: list[Word], ctx: Ctx) -> None:
    """scp, rsync, cp, docker/podman cp, pct push: where the files land."""
    name = basename(words[0].value)
    if not (name in ("scp", "rsync", "cp") or (name in ("docker", "podman", "pct")
                                               and len(words) > 1
                                               and words[1].value in ("cp", "push"))):
        return
    landed = copy_destination(name, words)
    if landed is None:
        return
    dest_host, dest_kind, paths = landed
    domain, where = ctx.domain, ctx.where
    if dest_kind is not None:
        domain = ctx.domain + (dest_kind,)
        where = f"inside {dest_kind[0]} {dest_kind[1]}"
    elif dest_host is not None:
        key = dest_host.rsplit("@", 1)[-1].lower()
        if key not in LOOPBACK:
            domain, where = (("ssh", key),), f"on {dest_host}"
    scan.copies.append(Copy(domain, frozenset(paths), command_text(words),
                            where or "this machine"))


def shell_key(ctx: Ctx) -> tuple:
    """The shell reading the current script: its working directory is its own."""
    runner = ctx.enclosing[ctx.runner].argv if 0 <= ctx.runner < len(ctx.enclosing) else None
    return ctx.domain, ctx.runner, runner


def record_cd(scan: Scan, words: list[Word], ctx: Ctx) -> None:
    """`cd DIR`: later relative paths in this shell are under DIR (unknown after `cd $X`)."""
    key = shell_key(ctx)
    args = [w.value for w in words[1:] if w.value not in ("-L", "-P", "--")]
    target = args[0] if args else "~"
    if target.startswith(("/", "~")):
        scan.cwd[key] = posixpath.normpath(target)
    elif key in scan.cwd and "$" not in target and target != "-":
        scan.cwd[key] = posixpath.normpath(scan.cwd[key] + "/" + target)
    else:
        scan.cwd.pop(key, None)  # `cd $X`, `cd -`, or relative to a directory nobody said


def resolved(value: str, cwd: str | None) -> list[str]:
    """The value, and where a relative path in it (`train.py`, `--cfg=a.yaml`) lands."""
    out = [value]
    if cwd is None or value.startswith("-") and "=" not in value:
        return out
    head, eq, rel = value.rpartition("=") if value.startswith("-") else ("", "", value)
    if rel and not rel.startswith(("/", "~", "$", "-")) and "://" not in rel:
        out.append(head + eq + posixpath.normpath(cwd + "/" + rel))
    return out


def host_paths_in_container(scan: Scan, command: Command, ctx: Ctx) -> None:
    """A command in a container that uses a path copied earlier to another filesystem."""
    if not any(kind in CONTAINER_KINDS for kind, _ in ctx.domain):
        return
    cwd = scan.cwd.get(shell_key(ctx))
    values = [r for w in command.words + [w for _, w in command.redirs]
              for r in resolved(w.value, cwd)]
    for copy in scan.copies:
        if id(copy) in scan.reported_copies or not inside_container(copy.domain, ctx.domain):
            continue
        path = next((p for v in values for p in copy.paths if mentions(v, p)), None)
        if path is None or any(c.domain == ctx.domain and path in c.paths
                               for c in scan.copies):
            continue
        scan.reported_copies.add(id(copy))
        owner = copy.where.removeprefix("on ")
        message = (f"`{command_text(command.words)}` uses {path} {ctx.where}, but "
                   f"`{copy.text}` copied it to the filesystem of {owner}, which this "
                   f"container does not see")
        on = ctx.target or "TARGET"
        fix = (f"copy into the container's own filesystem: `runward push --on {on} "
               f"LOCAL:{path}` (through the hop chain, sha256-checked), or `pct push ID "
               f"SRC {path}` / `docker cp SRC CONTAINER:{path}`; or use a path "
               f"bind-mounted into the container")
        scan.add("host-path-in-container", command.span(), message, WHY_HOST_PATH, fix)

