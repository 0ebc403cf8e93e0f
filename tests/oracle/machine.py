"""The rules: what users and the world do to runs, as a hypothesis RuleBasedStateMachine
whose invariant (checks.check_all) runs after every step. `make(kinds, holes)` builds the
machine for a set of target kinds; `holes=True` also walks model.KNOWN_HOLES."""

from __future__ import annotations

import os
import signal
import sys
import traceback

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from . import checks, link, more, ray, seams, truth, world
from .model import KNOWN_HOLES, MAX_RUNS, RunModel

STATS = {"steps": 0, "checks": 0, "verbs": 0}  # steps: rules that acted
TRACE = bool(os.environ.get("ORACLE_TRACE"))  # each verb and its exit code on stderr
PICK = st.integers(0, 1 << 16)
SUPERVISED_ESCAPEES = os.environ.get("ORACLE_SUPERVISED_ESCAPEES", "1") != "0"  # =0 leaves them out
NO_CGROUP_KINDS = ("podman", "pct", "pctw", "user")   # runward makes no cgroup there (doctor: cgroups: no)


SEEN: list = []  # every violation and harness failure, as it happened (soak.py prints the first)


class Violation(AssertionError):
    def __init__(self, msg: str = ""):
        why = ray.restarted()   # the shared cluster restarted by someone else: the world's doing
        if why:
            msg = "%s; %s" % (why, msg)
        AssertionError.__init__(self, msg)
        seen("world" if why else "violation", msg)


def seen(what: str, msg: str) -> None:
    """Said at once: hypothesis may report only a replay's outcome (FlakyFailure, or
    FlakyStrategyDefinition when the replay failed earlier), and the first failure is the one
    that counts."""
    SEEN.append("%s: %s" % (what, msg))
    print("oracle: seen %s: %s" % (what, msg[:2000]), file=sys.stderr, flush=True)


class OracleBase(RuleBasedStateMachine):
    KINDS: tuple = ("local",)
    HOLES = False

    def __init__(self):
        super().__init__()
        self._session = None
        self.runs: dict[str, RunModel] = {}
        self.n = 0

    @property
    def session(self) -> world.Session:
        """The example's session, made when a rule first needs it: an example that never
        acts (hypothesis' first: see nothing_yet) makes no container, relay or homes."""
        if self._session is None:
            try:
                self._session = world.Session(list(self.KINDS))
            except BaseException as e:  # the world could not be set up: said, as a violation is
                seen("harness", "a session could not be set up: %r" % (e,))
                raise
        return self._session

    # --- helpers

    def teardown(self):
        # hypothesis runs teardown in a `finally`: an error a rule raised that is not a
        # Violation (a harness fault, a verb's timeout) is in flight here, and is said now, since
        # hypothesis' replay of the example may end in FlakyStrategyDefinition and lose it
        err = sys.exc_info()[1]
        if (isinstance(err, Exception) and not isinstance(err, Violation) and not getattr(err, "_oracle_seen", False)
                and not type(err).__module__.startswith("hypothesis")):   # its own control flow (StopTest)
            err._oracle_seen = True
            seen("error", "".join(traceback.format_exception(type(err), err, err.__traceback__))[-3000:])
        if self._session is not None:
            self._session.cleanup([m.token for m in self.runs.values()])

    def gated(self, hole: str) -> bool:
        """True when a rule would walk a known hole and this profile does not walk them."""
        return hole in KNOWN_HOLES and not self.HOLES

    def pick(self, i: int, ok) -> RunModel | None:
        c = [m for m in self.runs.values() if ok(m) and not seams.hidden(self.session, m)]
        return c[i % len(c)] if c else None

    def any(self, ok) -> bool:
        return any(ok(m) and not seams.hidden(self.session, m) for m in self.runs.values())

    def acted(self, what: str, m: RunModel | None = None):
        STATS["steps"] += 1
        if TRACE:
            print("[oracle] step %s %s" % (what, m.name if m else ""), file=sys.stderr, flush=True)

    def cli(self, *args, kind: str = "", timeout: float = 180) -> tuple[int, dict]:
        STATS["verbs"] += 1
        rc, doc = self.session.cli(*args, kind=kind, timeout=timeout)
        if TRACE:
            print("[oracle] runward %s -> %d" % (" ".join(args), rc), file=sys.stderr, flush=True)
        return rc, doc

    def kept(self, ms) -> tuple[dict, list]:
        """What a refused or failed verb must leave as it was (issue 39, "Bad input": no run
        stopped, no file written, no record touched): checks.records of these runs on each of
        their nodes, {(name, node's on): records}, and their live processes."""
        recs = {(m.name, t.on): checks.records(t, m.name) for m in ms for t, _ in self.nodes(m)}
        return recs, [p for m in ms for t, tok in self.nodes(m) for p in truth.tree(tok, t.pidns).values()]

    def as_they_were(self, what: str, kept: tuple[dict, list]):
        """The verb (refused, or failed) changed no record of the runs kept() holds, and every
        process of theirs alive then lives on."""
        before, procs = kept
        after, _ = self.kept([self.runs[name] for name in dict.fromkeys(n for n, _ in before)])
        said = ["the records of %s on %s: %s" % (name, on, ", ".join(diff)) for (name, on), was in before.items()
                for diff in [checks.records_changed(was, after.get((name, on), {}))] if diff]
        gone = [p.cmdline[:60] for p in procs if not truth.alive(p)]
        if gone:
            said.append("what runs: %s died" % gone)
        if said:
            raise Violation("%s changed %s" % (what, "; ".join(said)))

    @staticmethod
    def violation(msg: str) -> Violation:
        return Violation(msg)

    def expect(self, what: str, rc: int, doc: dict, want: tuple):
        if rc not in want:
            raise Violation("%s: exit %d, expected %s: %s" % (what, rc, want, str(doc)[:600]))

    def target(self, m: RunModel):
        """The run's target; a multi-node run's node 0; an alias run's host, named now or not."""
        if m.kind == "alias":
            return self.session.alias_targets[m.host]
        return self.session.targets[checks.views(m)[0][0]]

    def nodes(self, m: RunModel):
        """(target, token) of every node of the run (one for a run on one target)."""
        return [(self.session.targets[t], tok) for t, tok in checks.views(m)]

    def single(self, m: RunModel) -> bool:
        """Not a multi-node run: the rules that drive one job (its ends, escapees, shim, rm,
        logs) walk these; a multi-node run gets start, stop, restart, edit and deploy."""
        return m.kind not in world.NODES

    def job(self, m: RunModel):
        """The job's python (not a --sh run's shell), from ground truth."""
        t = self.target(m)
        for p in truth.tree(m.token, t.pidns).values():
            words = p.cmdline.split()
            if words and words[0].endswith("python3") and "job.py" in p.cmdline:
                return p
        raise Violation("%s: the model says %s but no job process of it lives" % (m.name, m.state))

    def status_of(self, kind: str) -> dict:
        rc, doc = self.session.cli("status", "--on", kind, kind=kind)  # a target (or node) name
        if rc != 0:
            raise Violation("status --on %s: exit %d: %s" % (kind, rc, str(doc)[:600]))
        return {r["name"]: r for r in doc["result"]["runs"]}

    def write_job(self, m: RunModel):
        src = world.JOB.read_text().replace('VERSION = "v0"', 'VERSION = "v%d"' % m.local_version)
        d = self.session.work / m.name
        d.mkdir(exist_ok=True)
        (d / "job.py").write_text(src)

    def deploy(self, m: RunModel):
        rc, doc = self.cli("deploy", m.name, kind=m.kind)
        self.expect("deploy %s" % m.name, rc, doc, (0,))
        want = truth.hashlib.sha256((self.session.work / m.name / "job.py").read_bytes()).hexdigest()
        for t, _ in self.nodes(m):   # invariant 5, at once: deploy said verified, on every node
            got = truth.sha256(t.root, "%s/%s/job.py" % (t.app, m.name))
            if got != want:
                raise Violation("inv5 %s: deploy said verified, the job's filesystem on %s has %s, local %s" % (
                    m.name, t.on, got, want))
        m.deployed_version = m.local_version

    def signal_job(self, m: RunModel, ctl: str):
        t = self.target(m)
        p = self.job(m)
        with open(t.host_path("%s/%s/ctl-%s" % (t.app, m.name, m.token)), "w") as f:
            f.write(ctl)
        os.kill(p.pid, signal.SIGUSR1)
        return p

    # --- the invariant: after every step

    @invariant()
    def all_true(self):
        if not self.runs:
            return
        STATS["checks"] += 1
        v = checks.settle(lambda: checks.check_all(self.session, self.runs, self.status_of))
        if v:
            raise Violation("; ".join(v))


class OracleRules(OracleBase):
    """The rules. Each does what a user or the world does, then says in the model what
    should follow; the invariant decides whether it did."""

    @precondition(lambda self: not self.runs)
    @rule()
    def nothing_yet(self):
        """Nothing happens before the first run is defined. Hypothesis' first example takes
        the first valid rule in its order (no arguments first, then by name) at every step:
        this rule makes it twenty free steps. Without it that example is one rule twenty
        times over (a wedged hop waiting out its bound 20 times; a start and 19 kill_child)
        that the drawn examples walk anyway, a third of the CI profile's time."""

    @precondition(lambda self: sum(m.state != "removed" for m in self.runs.values()) < MAX_RUNS)
    @rule(k=PICK, sh=st.booleans(), supervised=st.booleans(), health=st.booleans())
    def start(self, k, sh, supervised, health=False):
        """A user defines a run in runward.toml, deploys its code and starts it."""
        kind = self.KINDS[k % len(self.KINDS)]
        if kind in world.NODES:
            sh = supervised = health = False   # a multi-node run: argv (its {node_rank}), unsupervised
        if kind == "ray":   # a policy is refused on Ray: a quarter of its starts ask one (k's bit 8 says which)
            both = supervised and health
            supervised, health = both and not k >> 8 & 1, both and bool(k >> 8 & 1)
        self.acted("start")
        m = self.define(kind, sh, supervised, health)
        if kind == "ray" and (supervised or health):
            return self.refused_on_ray(m)
        rc, doc = self.cli("start", m.name, kind=m.kind)
        self.expect("start %s" % m.name, rc, doc, (0,))
        m.running_version = m.deployed_version

    def refused_on_ray(self, m: RunModel):
        """A supervision policy on a Ray run (docs/ray.md): refused, exit 2, before anything is
        asked of Ray: no record but deploy's, nothing of the job alive. The run is then never
        listed (the model's removed)."""
        before = self.kept([m])
        rc, doc = self.cli("start", m.name, kind=m.kind)
        what = "start %s on Ray with %s" % (m.name, "restart" if m.supervised else "health actions")
        self.expect(what, rc, doc, (2,))
        self.as_they_were(what + " (refused)", before)
        if truth.tree(m.token, self.target(m).pidns) or ray.marked(m.name):
            raise Violation("%s: refused, but a process of the job lives" % what)
        m.state, m.log_removed, m.attempt = "removed", True, 0   # attempt 0: it never ran (pull has nothing)

    def define(self, kind: str, sh: bool = False, supervised: bool = False, health: bool = False) -> RunModel:
        """A run of that kind written into runward.toml, its code written and deployed: all a
        start needs."""
        self.n += 1
        name = "orc%s-%d" % (self.session.id[:6], self.n)
        m = RunModel(name, kind, "ORCTOK-%s-%d" % (self.session.id, self.n), sh=sh, supervised=supervised,
                     restarts_left=1 if supervised else 0, health=health,
                     host=self.session.alias_host if kind == "alias" else "")
        t = self.target(m)
        job = "%s/%s/job.py" % (t.spec_app or t.app, name)
        spec = ['[runs.%s]' % name, 'files = ["%s/job.py:%s"]' % (name, job), 'settle = 0.5']
        if kind in world.NODES:
            spec += ['nodes = [%s]' % ", ".join('"%s"' % n[0] for n in world.NODES[kind]),
                     'command = ["python3", "%s", "%s-r{node_rank}"]' % (job, m.token)]
            if kind == "mnct":   # two containers with no network between them: no coordinator link
                spec.append('on_node_failure = "continue"')
        else:
            spec.append('on = "%s"' % kind)
            spec.append('sh = "python3 %s %s; exit $?"' % (job, m.token) if sh else
                        'command = ["python3", "%s", "%s"]' % (job, m.token))
        if supervised:
            spec += ['restart = "on-failure"', 'max_restarts = 1', 'backoff = "1s"', 'backoff_max = "1s"',
                     'min_uptime = "1s"']
        if health:
            spec += ['[runs.%s.health]' % name, 'interval = 1', 'actions = { nan = "stop" }']
        self.session.runs_toml[name] = "\n".join(spec) + "\n"
        self.session.write_toml()
        self.write_job(m)
        self.runs[name] = m
        self.deploy(m)
        return m

    @precondition(lambda self: bool(self.runs) and self.any(lambda m: m.state != "removed"))
    @rule(i=PICK)
    def stop(self, i):
        m = self.pick(i, lambda m: m.state != "removed")
        self.acted("stop", m)
        terms = self.terms(m) if m.paused else None
        rc, doc = self.cli("stop", m.name, kind=m.kind)
        self.expect("stop %s" % m.name, rc, doc, (0,))
        res = doc.get("result") or {}
        if m.live and not res.get("verified_dead"):
            raise Violation("stop %s: exit 0 without verified_dead: %s" % (m.name, str(res)[:400]))
        procs = truth.scan()
        trees = [checks.live_of(m, tok, t, procs) for t, tok in self.nodes(m)]
        # what the stop says it cannot see (its blind_spot: no cgroup, the shim killed) is said,
        # not hidden: excused exactly as invariant 1 excuses it (checks.unseeable)
        left = {p.pid: p for tree in trees for p in tree.values() if not checks.unseeable(p, res, tree)}
        if left:   # invariant 2, at once: the stop said verified, on every node
            raise Violation("inv2 %s: stop said verified, alive: %s" % (
                m.name, [p.cmdline[:60] for p in left.values()]))
        if terms is not None and self.terms(m) <= terms:   # paused: resumed after the signal, so its handler ran
            raise Violation("%s: the stop of a paused job did not let its TERM handler run (term-%s unchanged)" % (
                m.name, m.token))
        m.stopped()
        self.ray_history(m)

    def ray_history(self, m: RunModel):
        """A Ray run's history after its stop or its end: what runward keeps of Ray's word."""
        v = checks.settle(lambda: ray.history_says(self.cli, m)) if m.kind == "ray" else []
        if v:
            raise Violation(v[0])

    def terms(self, m: RunModel) -> int:
        """How many times the job's TERM handler ran (its lines in term-TOKEN)."""
        t = self.target(m)
        return (truth.read_text(t.root, "%s/%s/term-%s" % (t.app, m.name, m.token)) or "").count("\n")

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def pause(self, i):
        """Ctrl-Z, a debugger: the job's python is stopped (SIGSTOP) from outside. It lives,
        paused: status must say so (checks.check_paused), and a stop must resume it after its
        signal so that its TERM handler runs (the stop rule reads term-TOKEN)."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m) and not m.paused)
        if m is None:
            return
        self.acted("pause", m)
        p = self.job(m)
        os.kill(p.pid, signal.SIGSTOP)
        m.paused = p.nspid

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def resume(self, i):
        """fg, the debugger detaches: SIGCONT to the paused job."""
        m = self.pick(i, lambda m: m.paused and m.state == "running")
        if m is None:
            return
        self.acted("resume", m)
        os.kill(self.job(m).pid, signal.SIGCONT)
        m.paused = 0

    def _restart_ok(self, m, deploy):
        if m.state == "removed" or m.supervised:
            return False
        return deploy or m.local_version == m.deployed_version or not self.gated("restart-old-code")

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, deploy=st.booleans())
    def restart(self, i, deploy):
        """restart [--deploy]. Without --deploy after a local edit it must refuse (exit 2)
        and leave the run as it was (issue 25 item 11)."""
        m = self.pick(i, lambda m: self._restart_ok(m, deploy))
        if m is None:
            return
        self.acted("restart", m)
        before = self.kept([m])
        rc, doc = self.cli("restart", m.name, *(["--deploy"] if deploy else []), kind=m.kind)
        if not deploy and m.local_version != m.deployed_version:
            what = "restart %s after a local edit, without --deploy" % m.name
            self.expect(what, rc, doc, (2,))
            self.as_they_were(what + " (refused)", before)
            return
        self.expect("restart %s" % m.name, rc, doc, (0,))
        if deploy:
            m.deployed_version = m.local_version
        m.state, m.attempt, m.escapees, m.exits, m.paused = "running", m.attempt + 1, 0, set(), 0
        m.running_version = m.deployed_version

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, deploy=st.booleans())
    def edit_local(self, i, deploy):
        """The user edits the job's code here, and maybe deploys it."""
        m = self.pick(i, lambda m: m.state != "removed")
        if m is None:
            return
        self.acted("edit_local", m)
        m.local_version += 1
        self.write_job(m)
        if deploy:
            self.deploy(m)

    def _can_signal(self, m):
        return (self.single(m) and m.state in ("running", "orphaned") and (m.state == "running" or not m.escapees)
                and not m.paused)   # a paused job takes SIGUSR1 only once resumed

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, how=st.sampled_from(["exit 0", "exit 3", "signal 12", "kill 9"]))
    def job_ends(self, i, how):
        """The job exits by itself (0, a code, a signal), or is SIGKILLed from outside."""
        m = self.pick(i, lambda m: self._can_signal(m) and not (
            m.state == "orphaned" and m.escapees and self.gated("lost-run-members")))
        if m is None:
            return
        self.acted("job_ends", m)
        verb, n = how.split()
        how, n = ("signal", 9) if verb == "kill" else ("code" if verb == "exit" else "signal", int(n))
        if verb == "kill":
            os.kill(self.job(m).pid, signal.SIGKILL)
        else:
            self.signal_job(m, "%s %d" % (verb, n))
        m.job_ended(how, n, ray.exits(m.sh, how, n) if m.kind == "ray" else None)
        self.ray_history(m)
        m.running_version = m.deployed_version  # a supervised restart runs what is on disk

    def _can_escape(self, m, kind):
        if m.state != "running" or not self.single(m) or m.paused or (m.supervised and not SUPERVISED_ESCAPEES):
            return False
        return not (kind == "envi" and m.kind in NO_CGROUP_KINDS and self.gated("escapee-no-cgroup"))

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, kind=st.sampled_from(["setsid", "double", "envi"]))
    def escape(self, i, kind):
        """The job leaves a process behind: its own session, a double fork, env -i."""
        m = self.pick(i, lambda m: self._can_escape(m, kind))
        if m is None:
            return
        self.acted("escape %s" % kind, m)
        self.signal_job(m, "escape %s" % kind)
        m.escapees += 1
        t = self.target(m)
        checks.settle(lambda: [] if any("%s-%s" % (m.token, kind) in p.cmdline
                                         for p in truth.tree(m.token, t.pidns).values()) else ["no escapee yet"])

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def kill_child(self, i):
        """SIGKILL from outside to one child of the job (its worker): the run goes on."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m))
        if m is None:
            return
        self.acted("kill_child", m)
        for p in truth.tree(m.token, self.target(m).pidns).values():
            if "%s-worker" % m.token in p.cmdline:
                os.kill(p.pid, signal.SIGKILL)

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def kill_shim(self, i):
        """SIGKILL from outside to the run's shim: the job lives on, unsupervised (orphaned)."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m) and m.kind != "ray"   # Ray's: no shim
                      and not (m.escapees and self.gated("lost-run-members")))
        if m is None:
            return
        self.acted("kill_shim", m)
        shim = self.job(m).pid
        for _ in range(4):   # the job's python, maybe a --sh run's shell, then the shim
            with open("/proc/%d/stat" % shim) as f:
                shim = int(f.read().rsplit(")", 1)[1].split()[1])
            with open("/proc/%d/cmdline" % shim, "rb") as f:
                if b"runward-shim" in f.read():
                    break
        else:
            raise Violation("%s: no shim among the job's ancestors" % m.name)
        os.kill(shim, signal.SIGKILL)
        m.state = "orphaned"

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK, logs=st.booleans())
    def rm(self, i, logs):
        """rm [--logs]: refused (exit 1) while anything of the run lives."""
        m = self.pick(i, lambda m: m.state != "removed" and self.single(m))
        if m is None:
            return
        self.acted("rm", m)
        before = self.kept([m])
        rc, doc = self.cli("rm", m.name, *(["--logs"] if logs else []), kind=m.kind)
        if m.live or m.escapees:
            self.expect("rm %s (%s)" % (m.name, m.state), rc, doc, (1,))
            self.as_they_were("rm %s (%s, refused)" % (m.name, m.state), before)
            return
        self.expect("rm %s" % m.name, rc, doc, (0,))
        m.state, m.log_removed = "removed", logs
        m.unseen = (doc.get("result") or {}).get("blind_spot") or ""

    @precondition(lambda self: bool(self.runs))
    @rule(k=PICK)
    def prune(self, k):
        """prune --older-than 1s: what it removes must have been stopped (and nothing of it
        alive); what ended under a second ago may go either way."""
        kinds = [k for k in self.KINDS if k not in world.NODES]
        if not kinds:
            return
        kind = kinds[k % len(kinds)]
        self.acted("prune")
        rc, doc = self.cli("prune", "--older-than", "1s", "--on", kind, kind=kind)
        self.expect("prune --on %s" % kind, rc, doc, (0,))
        for r in (doc.get("result") or {}).get("removed") or ():
            m = self.runs.get(r["name"])
            if m is None:
                continue
            if seams.hidden(self.session, m):
                raise Violation("prune --on alias (now %s) removed %s, a run of %s" % (
                    self.session.alias_host, m.name, m.host))
            if m.live or m.escapees:
                raise Violation("prune removed %s, which the model calls %s (%d escapees)" % (m.name, m.state, m.escapees))
            m.state, m.unseen = "removed", r.get("blind_spot") or ""

    @precondition(lambda self: bool(self.runs))
    @rule(i=PICK)
    def logs(self, i):
        """logs: the job's own line for the current attempt is among the last lines."""
        m = self.pick(i, lambda m: m.state == "running" and self.single(m))
        if m is None:
            return
        self.acted("logs", m)
        t = self.target(m)

        def seen():
            ran = truth.read_text(t.root, "%s/%s/ran-%s" % (t.app, m.name, m.token)) or ""
            nonce = ran.split("\n")[-2].split()[1] if ran.count("\n") else None
            rc, doc = self.cli("logs", m.name, "-n", "50", kind=m.kind)
            lines = (doc.get("result") or {}).get("lines") or []
            return [] if rc == 0 and nonce and any(nonce in ln for ln in lines) else [
                "logs %s: exit %d, the job's line (nonce %s) not among %s" % (m.name, rc, nonce, lines[-5:])]
        v = checks.settle(seen)
        if v:
            raise Violation(v[0])


def make(kinds, holes: bool = False):
    """The machine class for these target kinds (each must be usable here: world.why_not)."""
    rules = (more.MoreRules, link.LinkRules, link.ContainerRules, seams.SeamRules, OracleRules)
    return type("Oracle_" + "_".join(kinds), rules, {"KINDS": tuple(kinds), "HOLES": holes})
