"""Run the oracle: the CI profile (tests/test_oracle.py) and soaks (scripts/oracle) share
this. Each example is one fresh session (its own homes and runs) of up to `per_example`
steps; hypothesis shrinks a failing one to a minimal sequence of rules."""

from __future__ import annotations

import threading
import time
import traceback

from hypothesis import HealthCheck, Phase, seed as hseed, settings
from hypothesis.stateful import run_state_machine_as_test

from . import machine, world


def usable(kinds: list[str]) -> tuple[list[str], dict]:
    """The kinds that can run here, and why each other one cannot."""
    ok, why = [], {}
    for k in kinds:
        w = world.why_not(k)
        (why.__setitem__(k, w) if w else ok.append(k))
    return ok, why


def profile(examples: int, per_example: int, shrink: bool = True) -> settings:
    phases = [Phase.explicit, Phase.generate] + ([Phase.shrink] if shrink else [])
    return settings(max_examples=examples, stateful_step_count=per_example, deadline=None, database=None,
                    phases=phases, suppress_health_check=list(HealthCheck), print_blob=False,
                    report_multiple_bugs=False)


def run_once(kinds: list[str], seed: int, examples: int, per_example: int, holes=False, shrink=True):
    """One hypothesis run; None when it found nothing, else the violation with its shrunk
    sequence (hypothesis' "state = ...; state.rule(...)" lines)."""
    cls = hseed(seed)(machine.make(kinds, holes))
    del machine.SEEN[:]
    try:
        run_state_machine_as_test(cls, settings=profile(examples, per_example, shrink))
    except Exception as e:  # noqa: BLE001 - a violation, or runward misbehaving otherwise
        notes = "\n".join(dict.fromkeys(getattr(e, "__notes__", [])))  # hypothesis may add one twice
        head = "".join(traceback.format_exception_only(type(e), e)).strip()
        # a violation seen once and not on hypothesis' replay comes as a FlakyFailure, an
        # exception group: what was seen is its sub-exception, and must not be lost
        for sub in getattr(e, "exceptions", ()):
            head += "\n  seen first: " + "".join(traceback.format_exception_only(type(sub), sub)).strip()
        if machine.SEEN and not getattr(e, "exceptions", ()):  # a replay's outcome: what was seen before it
            head += "\n  seen first: " + machine.SEEN[0]
        return "seed %d\n%s\n%s" % (seed, head, notes)
    return None


def soak(kinds: list[str], steps: int, seed: int, holes=False, per_example=25, shrink=True, every=0.0, out=None):
    """Runs examples with seeds seed, seed+1, ... until `steps` verbs have run. Returns
    (steps, checks, violations, world failures: examples ended by the shared Ray cluster's
    restart, machine.Violation's "world"; harness ends: harness_only()). EVERY > 0: a progress line on OUT that often (seconds), so
    that a soak stopped part way has said how far it got."""
    machine.STATS.update(steps=0, checks=0, verbs=0)
    found, world_failed, harness = [], [], []
    done = threading.Event()
    if every > 0:
        t0 = time.monotonic()

        def progress():
            while not done.wait(every):
                print("oracle: progress: %d steps, %d checks, %d violations, %d world failures, %d harness ends, %.0f s" % (
                    machine.STATS["steps"], machine.STATS["checks"], len(found), len(world_failed), len(harness),
                    time.monotonic() - t0), file=out, flush=True)
        threading.Thread(target=progress, daemon=True).start()
    try:
        return _soak(kinds, steps, seed, holes, per_example, shrink, found, world_failed, harness)
    finally:
        done.set()


def harness_only(v: str) -> bool:
    """An example hypothesis ended with FlakyStrategyDefinition while nothing was seen: its data
    tree found a rule's precondition answered otherwise on a replayed prefix (the model follows
    the world: a job that ended by itself, a restart that raced). No invariant failed and no
    rule raised (the machine's teardown says every error in flight): the harness's, not
    runward's, counted apart and printed."""
    return not machine.SEEN and "FlakyStrategyDefinition" in v


def _soak(kinds, steps, seed, holes, per_example, shrink, found, world_failed, harness):
    s = seed
    while machine.STATS["steps"] < steps:
        before = machine.STATS["steps"]
        # hypothesis' first example is its simplest (often one rule): ask for enough examples
        # that the budget is reached in one run, with ~half the rules acting in each
        examples = 1 + max(1, (steps - before) * 2 // per_example)
        v = run_once(kinds, s, examples, per_example, holes, shrink)
        if v:   # the first thing seen decides: the world's doing (a Ray restart), or a violation
            (harness if harness_only(v) else
             world_failed if machine.SEEN and machine.SEEN[0].startswith("world:") else found).append(v)
        s += 1
        if machine.STATS["steps"] == before:   # nothing ran at all: do not spin
            break
    return machine.STATS["steps"], machine.STATS["checks"], found, world_failed, harness
