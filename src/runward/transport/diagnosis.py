"""A call that ended without the agent's reply, diagnosed (transport/agentcall.py's split, by concern):
its exit status and stderr read as ssh could not connect, container absent or stopped, python3
missing, the far side killed by a signal, a reply that is not JSON; each an error of errors.py
that names the hop and says what to do. "No output" is never an answer."""

from __future__ import annotations

import re

from ..errors import AgentError, HopFailed, RunwardError, Unreachable
from .exchange import run_call
from ..targets.sshconf import ssh_base
from ..targets import CONTAINER_HOPS, Hop, Target, ssh


# patterns are compiled on first use (re caches them): most calls never diagnose
KILLED_PAT = r"runward: the agent was killed by signal (\d+)"


class RawResult:
    __slots__ = ("argv", "returncode", "stdout_lines", "stderr", "duration_s")

    def __init__(self, argv, returncode, stdout_lines, stderr, duration_s):
        self.argv, self.returncode, self.stdout_lines = argv, returncode, stdout_lines
        self.stderr, self.duration_s = stderr, duration_s


# every container hop's own words, each pattern its module's (targets/pct.py, docker.py, ...)
_CONTAINER_ABSENT = "(?i)" + "|".join(m.ABSENT for m in CONTAINER_HOPS.values())
_CONTAINER_STOPPED = "(?i)" + "|".join(m.STOPPED for m in CONTAINER_HOPS.values())
_PYTHON_MISSING = (
    r"(?i)python3?: (command )?not found|python3?: No such file|executable file [`'\"]?python3?[`'\"]? not found|"
    r"exec: \"?python3\"?: executable file not found|Failed to exec \"?python3|"
    r"No such file or directory.*python3|python3.*No such file or directory")


# each container hop's own tool, run one level out (on the host, or in the container before it)
_TOOL_WORDS = "|".join(m.TOOL for m in CONTAINER_HOPS.values())
_TOOL_MISSING = (  # the shells', runc's, crun's, lxc-attach's and env's ways to say it
    r"(?:^|[\s:\"'`])(%(t)s)[\"'`]?: (?:line \d+: )?(?:command )?not found|"
    r"exec: \"?(%(t)s)\"?: executable file not found|executable file [`'\"](%(t)s)[`'\"] not found|"
    r"Failed to exec \"(%(t)s)\"|(?:^|[\s'\"])(%(t)s)['\"]?: No such file or directory" % {"t": _TOOL_WORDS})
HOP_TIMEOUT_S = 10.0  # a container hop's bound (RUNWARD_HOP_TIMEOUT): docs/targets.md, "Bounds"
# what a container tool itself prints (each hop's LINE: lxc-attach's "lxc-attach: NAME:
# file.c: ...", podman's and docker's "Error: ..." / "Error response from daemon: ...", runc's
# and crun's); ssh's own lines are targets/ssh.py's LINE
_TOOL_LINE = r"(?m)^\s*(?:%s)" % "|".join(dict.fromkeys(m.LINE for m in CONTAINER_HOPS.values()))


def diagnose(target: Target, raw: RawResult) -> RunwardError:
    rc, err = raw.returncode, raw.stderr.strip()
    last = "\n".join(err.splitlines()[-5:])
    details = {"exit_status": rc, "stderr_tail": last, "argv0": raw.argv[0]}
    ssh_hop = next((h for h in target.hops if h.kind == "ssh"), None)
    killed = re.search(KILLED_PAT, err)
    if (killed or rc < 0 or 128 < rc < 192) and (stopped := _container_stopped(target)):
        return stopped  # a container stopped under the call kills what runs in it: say that
    if killed:
        where = str(target.hops[-1])
        name = _signame(int(killed.group(1)))
        return HopFailed(f"{where}: the agent was killed by {name} before it answered",
                         "something on the target killed it: the OOM killer (check dmesg), a `pkill -f` "
                         "whose pattern matched it, or a container/session timeout", hop=where, details=details)
    containers = [h for h in target.hops if h.kind != "ssh"]
    if ssh_hop is not None and rc == 255:
        # a container tool's own lines ("lxc-attach: ... Connection refused - Failed to get
        # init pid") are never ssh's: under ssh its exit 255 reads the same as ssh's own
        said = "\n".join(ln for ln in err.splitlines() if not re.match(_TOOL_LINE, ln)) if containers else err
        for pat, what, hint in ssh.FAILURES:
            if re.search(pat, said):
                return Unreachable(f"{ssh_hop}: {what}", hint, hop=str(ssh_hop), details=details)
    if containers and rc != 0 and _hop_said(err, rc, ssh_hop):
        found = _hop_at_fault(target, err, rc, details)
        if found is not None:
            return found
    missing = re.search(r"ModuleNotFoundError: No module named '([\w.]+)'", err)
    if missing and rc == 1:
        # the bootstrap's own imports (the agent answers this itself once it runs): the
        # target's state, said once, with no traceback
        where = str(target.hops[-1]) if target.hops else "local"
        return HopFailed(f"{where}: python3 on the target lacks the standard module {missing.group(1)!r}",
                         "install the whole standard library there: apt-get install -y python3 "
                         "(Debian/Ubuntu; other systems: their python3 package)", hop=where,
                         details={"exit_status": rc, "module": missing.group(1), "argv0": raw.argv[0]})
    if rc in (126, 127) or re.search(_PYTHON_MISSING, err):
        hop = target.hops[-1] if target.hops else None
        where = str(hop) if hop else "local"
        if re.search(_PYTHON_MISSING, err) or rc == 127:
            return HopFailed(f"{where}: python3 not found on the target", 
                             "install python3 (>= 3.8) where the job runs: e.g. apt-get install -y python3-minimal",
                             hop=where, details=details)
    if ssh_hop is not None and rc == 255:
        # no known ssh message and no container message: the channel itself ended badly
        if not last and ssh_hop is target.hops[0] and (silent := link_stopped(ssh_hop, details)):
            return silent  # its master ended on its keepalive under the call (a follow mid-stream)
        if not raw.stdout_lines and not last:
            return HopFailed(f"{ssh_hop}: ssh ended with 255 and no message: the connection dropped, or the "
                             "remote side was killed by a signal", "retry; check the host's sshd log and dmesg",
                             hop=str(ssh_hop), details=details)
        if not raw.stdout_lines:
            return Unreachable(f"{ssh_hop}: ssh failed (exit 255): {last or 'no message'}",
                               "run `runward doctor --on ...` or ssh -v by hand", hop=str(ssh_hop),
                               details=details)
    if rc < 0 or 128 < rc < 192:
        signum = -rc if rc < 0 else rc - 128
        name = _signame(signum)
        who = ("the agent" if target.is_local else "the local ssh/hop process") if rc < 0 else "the far side"
        return HopFailed(f"{who} was killed by {name} before the agent answered (exit {rc})",
                         "something on the target killed the agent (OOM killer? a pkill -f matching it?); "
                         "check dmesg on the target", hop=str(target.hops[-1]) if target.hops else "local",
                         details=details)
    if raw.stdout_lines:
        first = b"".join(raw.stdout_lines)[:200]
        return AgentError(f"the reply was not the agent's JSON; it began with {first!r}",
                          "a login script on the target prints to stdout (e.g. an echo in .bashrc); "
                          "make it quiet for non-interactive shells", hop=str(target.hops[-1]) if target.hops else "local",
                          details=details)
    # the message has stderr's last line; details (shown below it) the last five
    return AgentError(f"the agent gave no reply (exit status {rc}){': ' + last.splitlines()[-1] if last else ''}",
                      "run `runward doctor` on this target", hop=str(target.hops[-1]) if target.hops else "local",
                      details=details)


def link_stopped(hop: Hop, details: dict | None = None) -> Unreachable | None:
    """The call through HOP (the first, an ssh hop) ended with no reply and no message: if the
    control master that carried it is gone too, it ended on its keepalive, the link silent.
    Said as status says it, Unreachable; None where the master still answers (or none can be
    asked)."""
    from ..targets.sshconf import ssh_alive_options
    try:
        rc = run_call(hop.ssh_argv(ssh_base(), ["-O", "check"]), b"", None, None, 10)[0]
    except (RunwardError, OSError):
        return None
    if rc == 0:
        return None
    every = int(ssh_alive_options()[1].split("=")[1])
    return Unreachable(f"{hop}: the ssh link stopped answering (silent for {every} s, then 3 "
                       f"keepalives {every} s apart went unanswered): link down or host frozen",
                       "check the network to the host; runward status tries again with a new "
                       "connection (RUNWARD_SSH_ALIVE_TIMEOUT / [ssh] alive_timeout set the wait)",
                       hop=str(hop), details=details)


def _hop_said(err: str, rc: int, ssh_hop: Hop | None) -> bool:
    """Whether a failed call's stderr is a container hop's: its tool missing, a container
    absent or stopped, a tool's own line, or an exit 255 behind ssh that no ssh message
    explains. Python's own messages (python3 missing, a module missing) are not."""
    if re.search(_TOOL_MISSING, err):
        return True
    if re.search(_PYTHON_MISSING, err) or "ModuleNotFoundError" in err:
        return False
    return bool(re.search(_CONTAINER_ABSENT, err) or re.search(_CONTAINER_STOPPED, err)
                or re.search(_TOOL_LINE, err) or (ssh_hop is not None and rc == 255 and any(
                    ln.strip() and not re.match(ssh.LINE, ln) for ln in err.splitlines())))


def hop_timeout() -> float:
    """A container hop's bound, in seconds: RUNWARD_HOP_TIMEOUT, else HOP_TIMEOUT_S."""
    import os
    try:
        v = float(os.environ.get("RUNWARD_HOP_TIMEOUT") or HOP_TIMEOUT_S)
    except ValueError:
        return HOP_TIMEOUT_S
    return v if v > 0 else HOP_TIMEOUT_S


# run on the host through the ssh hop: end the tagged hop command whose pid and start time
# come on stdin (rule 2: never a pid alone), with its whole group (it leads one)
_END_FAR = ('read p t; read -r s </proc/"$p"/stat 2>/dev/null || exit 0; set -- ${s##*) }; '
            '[ "${20}" = "$t" ] && kill -9 -"$p" 2>/dev/null; exit 0')


TAG_WAIT_S = 2.0  # how long a Ctrl-C waits for a tag still in flight (one round trip, normally)


def tagged(target: Target) -> bool:
    """Whether an ssh hop of the chain is followed by a container hop (its command tagged)."""
    return any(h.kind == "ssh" and target.hops[i + 1].kind != "ssh" for i, h in enumerate(target.hops[:-1]))


def await_tag(target: Target, proc) -> None:
    """Before a call is given up: its tagged hop's pid and start time, which its remote shell
    writes first, waited for a moment (TAG_WAIT_S) where they have not come yet."""
    import time
    if not tagged(target):
        return
    deadline = time.monotonic() + TAG_WAIT_S
    while proc.hop_tag() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def end_far(target: Target, tag: tuple[int, int] | None) -> None:
    """A call given up here (its bound, a Ctrl-C, a failed handler): its hop command on the
    ssh host (a `pct exec` that never answered) is ended there too, by the pid and start
    time its tagged shell said. sshd does not signal a session's command when its channel
    closes, so a wedged one would run on for good. Within the hop bound; a failure is let be."""
    if tag is None:
        return
    ssh_at = next((i for i, h in enumerate(target.hops[:-1])
                   if h.kind == "ssh" and target.hops[i + 1].kind != "ssh"), None)
    if ssh_at is None:
        return
    try:
        run_call(Target(target.hops[:ssh_at + 1]).wrap(["/bin/sh", "-c", _END_FAR], ssh_base()),
                  b"%d %d\n" % tag, None, None, hop_timeout())
    except (RunwardError, OSError):
        pass


def _probe(hops, bound: float | None = None, watch=None, argv=("true",)) -> tuple[int, str] | None:
    """One `true` (or argv) through these hops (only on a failure's path, or a call's that has not
    answered within the hop bound): (exit status, stderr), the status None when it did not
    answer within the bound (its process group killed then); None when it could not be run
    at all. watch: the HopWatch that asks, told of the probe's process (it ends the probe
    when its call ends first)."""
    import time
    bound = bound or hop_timeout()
    t0 = time.monotonic()
    try:
        probe = run_call(Target(tuple(hops)).wrap(list(argv), ssh_base(), tagged=True), b"", None, None, bound,
                          watch=watch or _Probing(Target(tuple(hops))))
    except (RunwardError, OSError):
        return None
    hung = probe[0] is not None and probe[0] < 0 and time.monotonic() - t0 >= bound
    return (None if hung else probe[0] if probe[0] is not None else -1), probe[3]


class HopWatch:
    """The bound of a call through container hops. A container tool can wedge (a `pct exec`
    or `podman exec` that never starts the command), and the call would wait without end:
    once the call has not answered within the hop bound, one `true` goes through each
    prefix of its chain in turn (outermost first, each within the same bound). The first
    that does not answer is the wedged hop: the call is ended (its process group killed)
    and said as that hop's (error()). A prefix that answers is not wedged, nor is a chain
    through which the agent has said anything: a long call (a stop's grace, `logs -f`)
    goes on."""

    def __init__(self, target: Target, bound: float):
        self.target, self.bound = target, bound
        self.wedged: int | None = None  # the hop's index in the chain
        self._done = None
        self._probing = _Probing(target)

    @classmethod
    def of(cls, target: Target) -> "HopWatch | None":
        """A watch for a chain with a container hop; None for local and plain ssh targets
        (ssh's own bounds: its connect timeout and keepalive, targets/ssh.py)."""
        if not any(h.kind != "ssh" for h in target.hops):
            return None
        return cls(target, hop_timeout())

    def start(self, proc) -> None:
        import threading
        self._done = threading.Event()
        threading.Thread(target=self._run, args=(proc,), daemon=True).start()

    def cancel(self) -> None:
        """The call has ended: a probe still under way is ended with it (its `true` through
        a wedged hop would outlive the CLI, which does not wait for this thread)."""
        if self._done is not None:
            self._done.set()
            self._probing.end()

    def _run(self, proc) -> None:
        if self._done.wait(self.bound):
            return
        for i, hop in enumerate(self.target.hops):
            if hop.kind == "ssh":
                continue
            if proc.spoke:
                return  # the agent answers (a stop's first event): every hop works
            got = _probe(self.target.hops[:i + 1], self.bound, self._probing.of(self._done))
            if self._done.is_set() or proc.spoke or got is None:
                return
            if got[0] is None:
                self.wedged = i
                proc.kill()
                return
            if got[0] != 0:
                return  # failed, not wedged: the call's own end says why

    def end_far(self, tag) -> None:
        end_far(self.target, tag)

    def await_tag(self, proc) -> None:
        await_tag(self.target, proc)

    def error(self) -> RunwardError:
        return _wedged(self.target, self.wedged, self.bound)


class _Probing:
    """A probe's process, known to the HopWatch that asked for it (the watch interface of
    run_call: start, cancel, await_tag, end_far) so that the watch's cancel ends it; and,
    given up, ended on the ssh host too."""

    def __init__(self, target: Target):
        import threading
        self._lock = threading.Lock()
        self.target = target
        self.proc = self.done = None

    def of(self, done) -> "_Probing":
        self.done = done
        return self

    def start(self, proc) -> None:
        with self._lock:
            self.proc = proc
            if self.done is not None and self.done.is_set():
                proc.kill()  # the call ended as this probe began

    def cancel(self) -> None:
        with self._lock:
            self.proc = None

    def end(self) -> None:
        with self._lock:
            proc = self.proc
            if proc is not None:
                proc.kill()
        if proc is not None:
            proc.await_death()  # the CLI may exit next: the probe is dead first

    def end_far(self, tag) -> None:
        end_far(self.target, tag)

    def await_tag(self, proc) -> None:
        await_tag(self.target, proc)


def _wedged(target: Target, i: int, bound: float) -> RunwardError:
    """Hop i did not answer within the bound: a `true` through it did not either."""
    hop = target.hops[i]
    tool = CONTAINER_HOPS[hop.kind].TOOL
    return HopFailed(f"{hop}: `{tool}` did not answer within {bound:g}s (a `true` through it did not either): "
                     "the call was ended here",
                     f"check {tool} on {_where(target, i)} (a hung `{tool} exec`, a frozen container); "
                     "RUNWARD_HOP_TIMEOUT sets the bound", hop=str(hop), details={"wedged": True, "bound_s": bound})


def _hop_at_fault(target: Target, err: str, rc: int, details: dict) -> RunwardError | None:
    """Which container hop failed, found by one `true` through each prefix of the chain in
    turn (outermost first): the first that fails is the failing hop, said from its own
    stderr (its tool missing, its container absent or stopped). The message alone cannot
    say it: `pct:200/podman:x` with no container x blamed pct:200, whose tool printed nothing.
    When every prefix answers now, the call's failure came and went: a transient failure of
    the container tool, said as such. None: a probe could not run, or an ssh hop before them
    fails (ssh's to say)."""
    found = _first_failing(target)
    if found is None:
        return None
    if found != "none":
        i, prc, perr = found
        return _hop_failed(target, i, prc, perr, dict(details, probe={
            "hops": str(Target(target.hops[:i + 1])), "exit_status": prc,
            "stderr_tail": "\n".join(perr.splitlines()[-5:])}))
    hop = _hop_named(target, err)
    tool = CONTAINER_HOPS[hop.kind].TOOL
    line = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), "no message")
    return HopFailed(f"{hop}: `{tool}` failed (exit {rc}): {line}; `true` through the same hops answers now: "
                     f"a transient failure of {tool}, not the container's state",
                     f"retry; if it recurs, see {tool}'s own logs on {_where(target, target.hops.index(hop))}",
                     hop=str(hop), details=dict(details, transient=True))


def _first_failing(target: Target):
    """(index, exit status, stderr) of the first container hop through which `true` fails,
    outermost first; "none" when every one answers; None when a probe could not run or an
    ssh hop before it failed."""
    for i, hop in enumerate(target.hops):
        if hop.kind == "ssh":
            continue
        got = _probe(target.hops[:i + 1])
        if got is None:
            return None
        prc, perr = got
        if prc == 0:
            continue
        perr = perr.strip()
        if prc == 255 and any(h.kind == "ssh" for h in target.hops[:i]) and not (
                re.search(_TOOL_LINE, perr) or re.search(_TOOL_MISSING, perr)):
            return None
        return i, prc, perr
    return "none"


def _hop_failed(target: Target, i: int, rc: int, err: str, details: dict) -> RunwardError:
    """Hop i's own failure (its probe's exit status and stderr)."""
    hop = target.hops[i]
    tool = CONTAINER_HOPS[hop.kind].TOOL
    where = _where(target, i)
    if rc is None:
        return _wedged(target, i, hop_timeout())
    missing = re.search(_TOOL_MISSING, err)
    if missing and next(g for g in missing.groups() if g) == tool:
        return HopFailed(f"{hop}: `{tool}` not found on {where}",
                         f"install {tool} on {where}, or correct the target: {hop} runs `{tool}` there",
                         hop=str(hop), details=dict(details, missing_tool=tool))
    state = _container_state(target, i, err)
    if state == "absent":
        return HopFailed(f"{hop}: container not found", _container_hint(hop, "absent"), hop=str(hop),
                         details=details)
    if state == "stopped":
        return HopFailed(f"{hop}: container is not running", _container_hint(hop, "stopped"), hop=str(hop),
                         details=details)
    line = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), "no message")
    return HopFailed(f"{hop}: `{tool}` failed (exit {rc}): {line}", _container_hint(hop, "absent"), hop=str(hop),
                     details=details)


def _where(target: Target, i: int) -> str:
    """Where hop i's tool runs: the container before it, the ssh host, or this machine."""
    if i == 0:
        return "this machine"
    before = target.hops[i - 1]
    return f"the host {before.name}" if before.kind == "ssh" else str(before)


def _hop_named(target: Target, err: str) -> Hop:
    """The container hop a tool's message names (its name in the message, else its tool's
    first word), the last container hop where none does."""
    containers = [h for h in target.hops if h.kind != "ssh"]
    for hop in reversed(containers):
        if re.search(r"(?<![\w.-])%s(?![\w-])" % re.escape(hop.name), err):
            return hop
    for hop in reversed(containers):
        if re.search(r"(?m)^\s*(?:%s)" % CONTAINER_HOPS[hop.kind].SAYS, err):
            return hop
    return containers[-1]


def _container_stopped(target: Target) -> RunwardError | None:
    """After a call through a container was killed by a signal: is the container itself
    still there and running? One `true` through the same hops (only on this failure path);
    the container's stop is the cause then, not the OOM killer or a pkill."""
    if not any(h.kind != "ssh" for h in target.hops):
        return None
    try:
        probe = run_call(target.wrap(["true"], ssh_base(), tagged=True), b"", None, None, hop_timeout(),
                          watch=_Probing(target))
    except (RunwardError, OSError):
        return None
    rc, err = probe[0], probe[3]
    if rc == 0:
        return None
    found = _first_failing(target)
    hop = target.hops[found[0]] if isinstance(found, tuple) else next(h for h in target.hops if h.kind != "ssh")
    if isinstance(found, tuple):
        err = found[2]  # the failing hop's own words
    state = _container_state(target, target.hops.index(hop), err)
    if state == "absent":
        return HopFailed(f"{hop}: the container was removed while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "absent"), hop=str(hop), details={"stderr_tail": err[-500:]})
    if state == "stopped":
        return HopFailed(f"{hop}: the container stopped while the call ran (what ran in it was killed with it)",
                         _container_hint(hop, "stopped"), hop=str(hop), details={"stderr_tail": err[-500:]})
    return None


def _container_state(target: Target, i: int, err: str) -> str | None:
    """"absent", "stopped" or None (neither), from hop i's tool's own words; where those say
    stopped and the hop's tool says so of a missing container too (lxc-attach), its EXISTS
    command, run one level out, decides."""
    if re.search(_CONTAINER_ABSENT, err) and not re.search(_PYTHON_MISSING, err):
        return "absent"
    if not re.search(_CONTAINER_STOPPED, err):
        return None
    hop = target.hops[i]
    module = CONTAINER_HOPS[hop.kind]
    exists = getattr(module, "EXISTS", None)
    if exists:
        got = _probe(target.hops[:i], argv=[w.format(name=hop.name) for w in exists])
        if got is not None and got[0] not in (0, None) and re.search("(?i)" + module.ABSENT, got[1]):
            return "absent"
    return "stopped"


def _container_hint(hop: Hop, what: str) -> str:
    return ("check the container name/id and that it is running: " if what == "absent"
            else "start it first: ") + CONTAINER_HOPS[hop.kind].CHECK.format(name=hop.name)


def _signame(num: int) -> str:
    import signal
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
