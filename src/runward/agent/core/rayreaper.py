"""The Ray job's entry: a small wrapper that Ray's entrypoint shell execs (ops/ray.py), and how
/proc shows its three processes (docs/ray.md, "The entry's subreaper").

Ray's JobSupervisor worker runs the entrypoint as a child of its own (a new session); a child
of the job that clears its environment (env -i) and leaves that session (setsid) carries
nothing of the run and, orphaned, goes to pid 1: Ray's raylet is no subreaper unless started
with RAY_kill_child_processes_on_worker_exit_with_raylet_subreaper. So the entry is three
processes, as the local shim is to its job (supervise/shim.py):

    ENTRY   Ray's child, the one whose exit Ray records: it exits as the job did, its code
            or its signal, so Ray's driver_exit_code is the job's (0, 1, 127, -15).
    REAPER  ENTRY's child, a child subreaper (prctl PR_SET_CHILD_SUBREAPER): every orphan of
            the job's tree comes to it, so the stop finds them as its descendants. It tells
            ENTRY how the job ended, then stays the parent of those orphans that nothing else
            ties to the run (no marker) until each has ended, as the shim does, so status
            says stray and stop ends them; the marked ones it leaves: the marker finds them.
    job     REAPER's first child: the command itself (exec), the driver runward reports
            (stacks, gpus and paused read it), with the signal dispositions Ray gave the
            entry and an empty signal mask (Ray's worker blocks SIGINT: --stop-signal INT,
            torchrun's orderly stop, must reach it), SIGPIPE and SIGXFSZ at their defaults.

ENTRY and REAPER ignore every signal a stop may send, as the shim does (its _QUIET): Ray's
stop and runward's signal each process of the tree themselves, so a forwarded copy would be
the job's second TERM or INT, which to torchrun, Lightning and the HF Trainer means "abort
now" (proc/terminate.py). All three stay in Ray's session and process group: Ray's watchdog
KILLs that group when its JobSupervisor worker dies (a head restart), as it KILLed the
driver before. A program that cannot be run is the shell's 127 (126: not executable).

REAPER and the job share their parent's fate (prctl PR_SET_PDEATHSIG: KILL), REAPER until the
job has ended: a JobSupervisor worker that dies (its node lost, a head restart) KILLs its own
children, the entry among them, where it KILLed the driver before; the job dies with it, as
it did, and REAPER's orphans go to pid 1, as they did.

REAPER names itself (its comm, prctl PR_SET_NAME) before it forks the job, and renames itself
once the job has ended and before it is reaped (waitid WNOWAIT): the job is then REAPER's
earliest child, and no adopted orphan is ever taken for it."""

REAPER_NAME = "rw-reaper"          # the job lives (REAPER's earliest child)
REAPER_DONE = "rw-reaper-done"     # the job has ended: what REAPER holds are orphans

# The entry's code and the command (JSON) travel in its environment, each taken out before
# the job starts: `ps` shows ENTRY and REAPER as `python -S -E -c LOADER`, and only the job
# carries the command in its command line (a `pkill -f train.py`, the oracle's token).
CODE_VAR, ARGV_VAR = "RUNWARD_RAY_ENTRY", "RUNWARD_RAY_ARGV"
LOADER = "import os; exec(os.environ.pop(%r))" % CODE_VAR

ENTRY = r'''import json, resource, signal, sys
argv = json.loads(os.environ.pop("''' + ARGV_VAR + r'''"))
FAULTS = {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT, signal.SIGSEGV, signal.SIGBUS,
          signal.SIGFPE, signal.SIGILL, signal.SIGABRT, signal.SIGTRAP, signal.SIGSYS}
given = {}
for s in signal.valid_signals():
    if s in FAULTS: continue
    try:
        h = signal.getsignal(s)
        given[s] = signal.SIG_IGN if h == signal.SIG_IGN and s not in (signal.SIGPIPE, signal.SIGXFSZ) else signal.SIG_DFL
        signal.signal(s, signal.SIG_IGN)
    except (OSError, ValueError, TypeError):
        given.pop(s, None)
signal.pthread_sigmask(signal.SIG_SETMASK, ())
try:
    import ctypes
    libc = ctypes.CDLL(None)
except Exception:  # python3-minimal has no ctypes: no subreaper, the command itself is the entry
    libc = None
MARK = ("RUNWARD_RUN=" + os.environ.get("RUNWARD_RUN", "")).encode()

def name(n):
    libc.prctl(15, n.encode(), 0, 0, 0)

def kids():
    me = os.getpid()
    try:
        with open("/proc/self/task/%d/children" % me) as f:
            return f.read().split()
    except OSError:  # a kernel without CONFIG_PROC_CHILDREN: each process's parent read
        pass
    out = []
    for d in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                if d.isdigit() and int(f.read().rsplit(b")", 1)[1].split()[1]) == me: out.append(d)
        except (OSError, IndexError, ValueError):
            continue
    return out

def unheld():
    out = []
    for d in kids():
        try:
            with open("/proc/%s/stat" % d, "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z": continue
            with open("/proc/%s/environ" % d, "rb") as f:
                if MARK not in f.read().split(b"\0"): out.append(d)
        except (OSError, IndexError, ValueError):
            continue
    return out

def share_fate(parent):
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent: os._exit(128 + signal.SIGKILL)

def job(parent=None):
    if parent: share_fate(parent)
    for s, h in given.items():
        signal.signal(s, h)
    try: os.execvp(argv[0], argv)
    except OSError as e:
        sys.stderr.write("%s: %s\n" % (argv[0], e.strerror)); sys.stderr.flush(); os._exit(127 if e.errno == 2 else 126)

def reaper(w, entry):
    share_fate(entry)
    libc.prctl(36, 1, 0, 0, 0)
    name("''' + REAPER_NAME + r'''")
    pid = os.fork()
    if pid == 0:
        os.close(w); job(os.getppid())
    while True:
        got = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
        if got.si_pid == pid: break
        os.waitpid(got.si_pid, 0)
    libc.prctl(1, 0, 0, 0, 0)
    name("''' + REAPER_DONE + r'''")
    _, status = os.waitpid(pid, 0)
    os.write(w, ("%d\n" % status).encode()); os.close(w)
    while unheld():
        try: os.waitpid(-1, 0)
        except ChildProcessError: break
    os._exit(0)

def end_as(status):
    if os.WIFSIGNALED(status):
        n = os.WTERMSIG(status)
        try:
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            signal.signal(n, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
        os.kill(os.getpid(), n)
        os._exit(128 + n)
    os._exit(os.WEXITSTATUS(status))

if libc is None: job()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r); reaper(w, os.getppid())
os.close(w)
said = b""
while True:
    chunk = os.read(r, 64)
    if not chunk: break
    said += chunk
end_as(int(said) if said.strip() else os.waitpid(pid, 0)[1])
'''


def reaper_of(entry, procs):
    """ENTRY's REAPER (pid) once it has named itself, else None."""
    for pid in procs.children().get(entry, ()):
        if procs[pid].comm in (REAPER_NAME, REAPER_DONE):
            return pid
    return None


def job_of(entry, procs):
    """The job (pid) under ENTRY while it lives, else None: REAPER's earliest child, before
    REAPER says the job ended (every other child is an orphan adopted after the job forked it)."""
    rp = reaper_of(entry, procs)
    if rp is None or procs[rp].comm != REAPER_NAME:
        return None
    kids = [procs[pid] for pid in procs.children().get(rp, ())]
    first = min(kids, key=lambda p: (p.start, p.pid), default=None)
    return None if first is None or first.dead else first.pid
