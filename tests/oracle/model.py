"""What should be true: the oracle's model of each run, updated by the rules from what the
user and the world did (never from what runward said), and the known holes of issue 25."""

from __future__ import annotations

from dataclasses import dataclass, field

# Combinations runward gets wrong today (issue 25), in one place. The CI profile never walks
# them (the rules' preconditions avoid them); `scripts/oracle --holes` walks them and should
# report the violation. Remove an entry once its fix lands: the CI profile then covers it.
# Each of issue 25's holes the oracle walked (items 3, 8, 11) is mended, and so are the Ray kind's
# (a paused driver, a signal's name, an env -i escapee: the entry's subreaper, core/rayreaper.py).
KNOWN_HOLES: dict = {}

LIVE = ("running", "stray", "orphaned")
MAX_RUNS = 3   # runs not removed at once: the CI machine has 2 cores
ENDED = ("exited", "gave_up", "lost", "stopped")   # stopped: a Ray run's verified stop (Ray's STOPPED)


def exits_for(sh: bool, how: str, n: int) -> set:
    """The exit facts a job ending `how` ("code" or "signal") with `n` may be reported as. A
    --sh run's recorded exit is its shell's: `...; exit $?` turns a signal into 128+N."""
    if how == "code":
        return {("code", n)}
    import signal
    name = signal.Signals(n).name
    return {("code", 128 + n)} if sh else {("signal", name)}


@dataclass
class RunModel:
    name: str
    kind: str
    token: str
    sh: bool = False
    supervised: bool = False
    health: bool = False      # [runs.NAME.health] actions = { nan = "stop" }, interval 1 s
    state: str = "running"
    attempt: int = 1
    exits: set = field(default_factory=set)   # acceptable exit facts; ("unknown",) allowed where listed
    escapees: int = 0
    restarts_left: int = 0
    local_version: int = 0
    deployed_version: int = 0
    running_version: int = 0
    log_removed: bool = False
    host: str = ""            # the alias kind's: the host the alias named when it started (seams.py)
    paused: int = 0           # the job's python (its pid in the target) stopped by SIGSTOP from outside
    unseen: str = ""          # the blind spot rm or prune named as it removed the run: what may live on

    @property
    def live(self) -> bool:
        return self.state in LIVE

    def job_ended(self, how: str, n: int, facts: set | None = None):
        """The job ended by itself (or by a signal from outside): what its shim will make of it
        (a Ray run's: what Ray's driver_exit_code says, `facts`)."""
        facts = facts or exits_for(self.sh, how, n)
        self.paused = 0
        if self.kind == "ray":   # Ray's driver_exit_code; escapees alive make the run stray, as anywhere
            self.exits, self.state = facts, ("stray" if self.escapees else "exited")
            return
        if self.state == "orphaned":   # no shim to record it: lost, its exit unknown
            self.state, self.exits = "lost", {("unknown",)}
            return
        failed = not (how == "code" and n == 0)
        if self.supervised and failed and self.restarts_left > 0:
            # the shim ends what the ended attempt left (its escapees) before it restarts
            self.restarts_left -= 1
            self.attempt += 1
            self.exits, self.escapees = set(), 0
            return
        self.exits = facts
        self.state = "gave_up" if self.supervised and failed else ("stray" if self.escapees else "exited")

    def stopped(self):
        """A verified stop: nothing of the run lives; the exit is the stop's signal, or
        unknown where no shim was there to see it (an orphan)."""
        if self.state == "running" and self.kind == "ray":
            # runward's own signal to the driver's tree (docs/ray.md), then Ray's record of
            # it (FAILED -15, or SUCCEEDED where the job's handler exits 0)
            self.exits, self.state = {("unknown",), ("signal", "SIGTERM"), ("code", 143), ("code", 0)}, "stopped"
        elif self.state == "running":
            self.exits = {("signal", "SIGTERM")} | ({("code", 143)} if self.sh else set())
        elif self.state == "orphaned":
            self.exits = {("signal", "SIGTERM"), ("code", 143), ("unknown",)}
        if self.state in LIVE:
            self.state = "exited"
        self.escapees, self.paused = 0, 0
