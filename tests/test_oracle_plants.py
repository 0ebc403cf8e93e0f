"""The oracle's checks, each shown failing on a defect planted for it (issue 39's proofs): a
copy of src/ with one edit, runward run from that copy, one short sequence of the oracle's
rules, and the violation the check must print. The same sequence passes on the tree itself
(the control), so it is the plant that the check sees. docs/testing.md, "Plants", says what
each found about its check.

- kill-pid-alone: a wedged hop's call ended by a kill of its pid alone, not its process group
  (what targets/spawn.Spawned would do). The hung `pct exec`'s child lives on, holding the call's
  output: "no hung pct left" must say so. Before the stand-in hung as pct does (a child of its
  own), this plant passed the check.
- rm-refused-writes-record: a refused rm (the run lives) that notes the refusal in the
  attempt record first. "Changed nothing" must see the record touched; the checks of state,
  exit, members, code and log alone never did.
- restart-refused-stops-first: the restart's drift check made after its stop, so a refused
  restart (a local edit, no --deploy) has stopped the run: records and processes changed.
- follower-deaf-to-stdin: the agent never watches the stdin its follower's caller holds, so
  an interrupted `logs -f` through ssh and podman leaves it following (conmon reads its
  output for good): invariant 7 must name it, found in the shared container by its ancestry
  (more._started_by_us), not as any new agent there."""

from __future__ import annotations

import re
import shutil

import pytest

from oracle import machine, more, truth, world

PLANTS = {   # name: (file under src/, the text, what it becomes)
    "kill-pid-alone": ("runward/targets/spawn.py", "os.killpg(self.pid, 9)", "os.kill(self.pid, 9)"),
    "rm-refused-writes-record": (
        "runward/agent/ops/records.py",
        '        if live is not None:\n            raise AgentFailure("RunAlive",',
        '        if live is not None:\n            store.update_attempt(att["attempt"], lambda a: a.update(rm_refused=live))\n'
        '            raise AgentFailure("RunAlive",'),
    "restart-refused-stops-first": (
        "runward/api.py",
        "    noted = check(last) if check is not None else None\n    changed = ",
        "    changed = "),
    "follower-deaf-to-stdin": (
        "runward/agent/main.py",
        'set_caller(stdin.fileno() if req.get("stdin_held") else None, stdout.fileno(), _silent_s(req))',
        'set_caller(None, stdout.fileno(), _silent_s(req))'),
}
# restart-refused-stops-first: the check, taken out above, comes back after the stop
_AFTER_STOP = ('        e.message = f"restart stopped at step \'stop\': {e.message} (nothing was started)"\n'
               "        raise\n")


def planted(tmp_path, name: str):
    """A copy of the tree's src/ with the plant NAME in it; its root (world.ROOT's stand-in)."""
    root = tmp_path / ("plant-" + name)
    shutil.copytree(world.ROOT / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    rel, old, new = PLANTS[name]
    path = root / "src" / rel
    text = path.read_text()
    assert text.count(old) == 1, "plant %s no longer applies to %s: edit PLANTS" % (name, rel)
    text = text.replace(old, new)
    if name == "restart-refused-stops-first":
        assert text.count(_AFTER_STOP) == 1, "plant %s no longer applies to %s" % (name, rel)
        text = text.replace(_AFTER_STOP, _AFTER_STOP + "    noted = check(last) if check is not None else None\n")
    path.write_text(text)
    return root


def walk(kind: str, steps) -> None:
    """STEPS (callables of the machine) on a fresh session of KIND, the invariant after each."""
    why = world.why_not(kind)
    if why:
        pytest.skip(why)
    state = machine.make([kind])()
    try:
        for step in steps:
            step(state)
            state.all_true()
    finally:
        state.teardown()


def caught(monkeypatch, tmp_path, name: str, kind: str, steps, says: str) -> None:
    walk(kind, steps)   # the control: the tree itself passes
    monkeypatch.setattr(world, "ROOT", planted(tmp_path, name))
    with pytest.raises(machine.Violation) as e:
        walk(kind, steps)
    assert re.search(says, str(e.value)), "plant %s: the oracle said %r" % (name, str(e.value)[:600])


def test_a_hop_killed_by_its_pid_alone_leaves_a_hung_pct_and_the_oracle_says_so(monkeypatch, tmp_path):
    caught(monkeypatch, tmp_path, "kill-pid-alone", "pctw", [lambda s: s.wedged_hop(i=0, verb="status")],
           r"status --on pctw with pct:200 wedged: no answer within \d+ s .*the hung pct left running: pids \['\d+")


def test_a_refused_rm_that_touches_a_record_is_a_change(monkeypatch, tmp_path):
    caught(monkeypatch, tmp_path, "rm-refused-writes-record", "local",
           [lambda s: s.start(k=0, sh=False, supervised=False), lambda s: s.rm(i=0, logs=False)],
           r"rm orc\w+-1 \(running, refused\) changed the records of orc\w+-1 on local: attempts/1.json rewritten")


def test_a_refused_restart_that_stopped_the_run_first_is_a_change(monkeypatch, tmp_path):
    caught(monkeypatch, tmp_path, "restart-refused-stops-first", "local",
           [lambda s: s.start(k=0, sh=False, supervised=False), lambda s: s.edit_local(i=0, deploy=False),
            lambda s: s.restart(i=0, deploy=False)],
           r"restart orc\w+-1 after a local edit, without --deploy \(refused\) changed the records of orc\w+-1 "
           r"on local: attempts/1.json rewritten")


def test_a_follower_deaf_to_its_callers_stdin_is_left_running_and_the_oracle_says_so(monkeypatch, tmp_path):
    seen = []   # what the follows started, killed after: the plant's follower never ends itself
    real = more.follow_procs

    def recorded(session, target, before):
        got = real(session, target, before)
        seen.extend(got)
        return got
    monkeypatch.setattr(more, "follow_procs", recorded)
    try:
        caught(monkeypatch, tmp_path, "follower-deaf-to-stdin", "podman",
               [lambda s: s.start(k=0, sh=False, supervised=False), lambda s: s.logs_follow_interrupted(i=0)],
               r"inv7 orc\w+-1: logs -f ended \(Ctrl-C\), still running: \[.*python3 -S -c import sys,os,marshal")
    finally:
        truth.kill_procs(seen)
