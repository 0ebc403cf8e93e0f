"""Nested commands: how `ssh host "pct exec 200 -- bash -lc '...'"` is unwrapped.

Each hop (a shell's -c string, ssh, a container's exec, eval, su -c, watch) says what process
it leaves alive around the command it runs, on which machine and in which PID namespace, and
what it runs next: a string a shell parses again, or an argv it execs as it is. The walker
follows that, level by level, with every span still pointing into the top-level command.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .lexer import Source, Word
from .parse import Command, Pipeline, argv_of, basename, getopt, getopt_permuted, join_words
from .processes import LOOPBACK, SHELLS, Ctx, Proc

# Options that take an argument, so that the word after them is not the host or command.
SSH_WITH_ARG = {"-" + c for c in "BbcDEeFIiJLlmOoPpQRSWw"}
DOCKER_EXEC_WITH_ARG = {"-e", "--env", "--env-file", "-u", "--user", "-w", "--workdir",
                        "--detach-keys", "--preserve-fds"}
LXC_ATTACH_WITH_ARG = {"-n", "--name", "-a", "--arch", "-s", "--namespaces", "-u", "--uid",
                       "-g", "--gid", "-f", "--rcfile", "-P", "--lxcpath", "-o", "--logfile",
                       "-l", "--logpriority", "-v", "--set-var", "--keep-var"}
KUBECTL_WITH_ARG = {"-n", "--namespace", "-c", "--container", "--context", "--kubeconfig",
                    "--cluster", "--user", "-f", "--filename", "--pod-running-timeout", "-s",
                    "--server"}
SHELL_WITH_ARG = {"-o", "+o", "-O", "+O", "--rcfile", "--init-file"}


@dataclass(frozen=True)
class Inner:
    """What a hop runs next, and the context it runs in.

    body: a Source (a string a shell parses again), a Pipeline (an argv the hop execs
    directly, its words already expanded out here), or None (nothing to follow).
    """

    ctx: Ctx
    body: Source | Pipeline | None = None


def enter(words: list[Word], ctx: Ctx) -> Inner | None:
    """The command run by the hop `words`, or None when words[0] is no hop."""
    name = basename(words[0].value)
    for applies, hop in ((name in SHELLS, shell_string), (name == "ssh", ssh),
                         (True, container), (name == "eval" and len(words) > 1, eval_string),
                         (name in ("su", "runuser"), su), (name == "watch", watch)):
        if applies and (inner := hop(words, ctx)) is not None:
            return inner
    return None


def shell_string(words: list[Word], ctx: Ctx) -> Inner | None:
    """`bash -lc STRING`: a shell with STRING in its own argv runs STRING."""
    opts, k = getopt(words[1:], SHELL_WITH_ARG)
    if not any(flag == "-c" for flag, _ in opts) or k + 1 >= len(words):
        return None  # `bash script.sh` or bash reading stdin: nothing to follow
    shell = Proc(argv_of(words), ctx.domain, ctx.level + 1, "shell", ctx.where,
                 family=basename(words[0].value))
    inner = ctx.push(shell, level=ctx.level + 1, runner=len(ctx.enclosing))
    return Inner(inner, words[k + 1].source())


def ssh_words(words: list[Word]) -> tuple[list, Word, list[Word]] | None:
    """(options, host word, remote command words) of `ssh [opts] HOST [opts] CMD...`; None
    without a host."""
    opts, k = getopt(words[1:], SSH_WITH_ARG)
    k += 1
    if k >= len(words):
        return None
    # OpenSSH parses options again right after the host (`ssh HOST -p 22 CMD`).
    more, j = getopt(words[k + 1:], SSH_WITH_ARG)
    return opts + more, words[k], words[k + 1 + j:]


def ssh(words: list[Word], ctx: Ctx) -> Inner:
    """`ssh [opts] HOST CMD...`: the client stays here, a login shell runs CMD there."""
    parts = ssh_words(words)
    if parts is None:
        return Inner(ctx)
    opts, host_word, remote = parts
    if not remote:
        return Inner(ctx)  # an interactive login: nothing to lint
    user = next((v for f, v in opts if f == "-l" and v), None)
    port = next((v for f, v in opts if f == "-p" and v), None)
    host = host_word.value
    display = host if "@" in host or not user else f"{user}@{host}"
    host_key = host.rsplit("@", 1)[-1].lower()
    client = Proc(argv_of(words), ctx.domain, ctx.level, "client", ctx.where)
    if host_key in LOOPBACK:
        domain, where, target = ctx.domain, ctx.where, ctx.target
    else:
        domain, where = (("ssh", host_key),), f"on {display}"
        target = f"ssh://{display}" + (f":{port}" if port else "")
    joined = join_words(remote)
    # sshd runs the user's login shell as `SHELL -c '<the words, joined by spaces>'`.
    shell = Proc(("bash", "-c", joined.text), domain, ctx.level + 1, "sshd-shell", where,
                 family="bash")
    inner = ctx.push(client, shell, domain=domain, where=where, target=target,
                     level=ctx.level + 1, runner=len(ctx.enclosing) + 1)
    return Inner(inner, joined)


def container(words: list[Word], ctx: Ctx) -> Inner | None:
    """`pct exec ID -- CMD`, `docker exec NAME CMD`...: CMD runs in the container's own PID
    namespace and filesystem; the client stays here."""
    hop = container_hop(words)
    if hop is None:
        return None
    kind, ident, label, argv = hop
    client = Proc(argv_of(words), ctx.domain, ctx.level, "client", ctx.where)
    where = f"inside {label}" + (f" {ctx.where}" if ctx.where else "")
    target = None
    if ctx.target is not None and kind != "kubectl":
        target = f"{ctx.target}/{kind}:{ident}" if ctx.target else f"{kind}:{ident}"
    inner = ctx.push(client, domain=ctx.domain + ((kind, ident),), where=where,
                     target=target, runner=-1)
    if not argv:
        return Inner(inner)
    # The hop execs this argv directly, no shell: its words were expanded out here.
    return Inner(inner, Pipeline([Command(list(argv), expanded=True)], None))


def eval_string(words: list[Word], ctx: Ctx) -> Inner:
    """`eval WORDS`: this same shell parses the joined words again, and stays alive."""
    return Inner(replace(ctx.with_runner_state("alive"), depth=ctx.depth + 1, evaluated=ctx.runner),
                 join_words(words[1:]))


def su(words: list[Word], ctx: Ctx) -> Inner | None:
    """`su [USER] -c CMD`: su waits while the user's shell runs CMD."""
    for k, w in enumerate(words[1:-1], 1):
        if w.value in ("-c", "--command"):
            su_proc = Proc(argv_of(words), ctx.domain, ctx.level, "wrapper", ctx.where,
                           catches=True)
            # su runs the target user's shell as `SHELL -c CMD`; bash is assumed.
            shell = Proc(("bash", "-c", words[k + 1].value), ctx.domain, ctx.level + 1,
                         "shell", ctx.where, family="bash")
            inner = ctx.push(su_proc, shell, level=ctx.level + 1,
                             runner=len(ctx.enclosing) + 1)
            return Inner(inner, words[k + 1].source())
    return None


def watch(words: list[Word], ctx: Ctx) -> Inner | None:
    """`watch CMD...`: watch stays alive and runs the joined words with `sh -c`."""
    opts, k = getopt(words[1:], {"-n", "--interval"})
    if k + 1 >= len(words) or any(f in ("-x", "--exec") for f, _ in opts):
        return None
    joined = join_words(words[k + 1:])
    watch_proc = Proc(argv_of(words), ctx.domain, ctx.level, "wrapper", ctx.where)
    # watch(1) runs its arguments, joined by spaces, with `sh -c` every interval.
    shell = Proc(("sh", "-c", joined.text), ctx.domain, ctx.level + 1, "shell", ctx.where,
                 family="sh")
    inner = ctx.push(watch_proc, shell, level=ctx.level + 1, runner=len(ctx.enclosing) + 1)
    return Inner(inner, joined)


def container_hop(words: list[Word]) -> tuple[str, str, str, list[Word]] | None:
    """(kind, id, label, argv run inside) for pct/lxc-attach/lxc/docker/podman/kubectl exec."""
    name = basename(words[0].value)
    rest = words[1:]
    if name == "pct" and len(rest) >= 2 and rest[0].value == "exec":
        argv = rest[2:]
        argv = argv[1:] if argv and argv[0].value == "--" else argv
        return "pct", rest[1].value, f"pct exec {rest[1].value}", argv
    if name == "lxc-attach":
        opts, k = getopt(rest, LXC_ATTACH_WITH_ARG)
        ident = next((v for f, v in opts if f in ("-n", "--name") and v), None)
        if ident is None and k < len(rest):
            ident, k = rest[k].value, k + 1
        if ident is None:
            return None
        argv = rest[k:]
        argv = argv[1:] if argv and argv[0].value == "--" else argv
        return "lxc", ident, f"lxc-attach -n {ident}", argv
    if name == "lxc" and len(rest) >= 2 and rest[0].value == "exec":
        opts, k = getopt(rest[2:], {"--env", "--cwd", "--user", "--group", "--mode"})
        return "lxc", rest[1].value, f"lxc exec {rest[1].value}", rest[2 + k:]
    if name in ("docker", "podman"):
        if rest[:2] and rest[0].value == "container":
            rest = rest[1:]
        if not rest or rest[0].value != "exec":
            return None
        opts, k = getopt(rest[1:], DOCKER_EXEC_WITH_ARG)
        if k + 1 >= len(rest):
            return None
        ident = rest[1 + k].value
        return name, ident, f"{name} exec {ident}", rest[2 + k:]
    if name == "kubectl" and rest and rest[0].value == "exec":
        values = argv_of(rest)
        if "--" not in values:
            return None
        cut = values.index("--")
        opts, operands = getopt_permuted(rest[1:cut], KUBECTL_WITH_ARG)
        if not operands:
            return None
        ident = operands[0].value
        return "kubectl", ident, f"kubectl exec {ident}", rest[cut + 1:]
    return None
