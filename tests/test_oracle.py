"""The model-based oracle's CI profile (issue 26; docs/testing.md): a fixed seed, a few
examples of ~20 rules per target kind, every invariant after every rule, over real targets.
Combinations runward gets wrong today are in tests/oracle/model.py KNOWN_HOLES and are not
walked here; `scripts/oracle --holes` walks them. A failure prints the seed and the failing
sequence of rules; `scripts/oracle --seed S --targets KIND` shrinks it."""

from __future__ import annotations

import pytest

from oracle import machine, seams, soak, world

SEED = 20261204
EXAMPLES = 6          # the first is hypothesis' simplest: twenty steps of nothing_yet, free
PER_EXAMPLE = 20
# the pctw kind's hop bound here: each wedged_hop waits it twice (the call, then a `true`
# through the hop), ~30 times in the profile; a `pct exec 200 -- true` answers in ~0.05 s
HOP_BOUND_S = 1.0


# target kinds walked together in one session share its ~20 rules (docs/testing.md)
GROUPS = ["local,user", "ssh,link,mn", "podman,podown", "pct,mnct", "alias,pctw", "ray"]
# a group's examples where not EXAMPLES: each Ray verb waits on Ray's own (a submission turns
# RUNNING in ~1.5 s), so the ray kind walks a session of its own, with fewer of them
EXAMPLES_OF = {"ray": 4}


@pytest.mark.parametrize("kinds", GROUPS)
def test_oracle_ci_profile(kinds, monkeypatch):
    monkeypatch.setattr(seams, "HOP_BOUND_S", HOP_BOUND_S)
    kinds = kinds.split(",")
    for kind in kinds:
        why = world.why_not(kind)
        if why:
            pytest.skip(why)
    machine.STATS.update(steps=0, checks=0, verbs=0)
    examples = EXAMPLES_OF.get(",".join(kinds), EXAMPLES)
    found = soak.run_once(kinds, SEED, examples, PER_EXAMPLE, holes=False, shrink=False)
    assert found is None or soak.harness_only(found), found   # a harness end fails nothing: said below
    print("oracle %s: %s%s" % (",".join(kinds), machine.STATS, "; ended by hypothesis' data tree" if found else ""))
    assert machine.STATS["steps"] >= examples, machine.STATS   # the rules acted, not only no-ops


def test_oracle_deploy_of_a_two_node_run_lands_on_both_filesystems():
    """The shrunk sequence the oracle printed for issue 25 item 9 put back (deploy of a
    multi-node run wrote to this machine only): two containers, two filesystems; each deploy
    (the start's, an edit's, restart --deploy's) is checked byte-equal on every node, and each
    rank says it runs the deployed code."""
    why = world.why_not("mnct")
    if why:
        pytest.skip(why)
    state = machine.make(["mnct"])()
    try:
        state.start(k=0, sh=False, supervised=False)
        state.all_true()
        state.edit_local(i=0, deploy=True)
        state.restart(i=0, deploy=False)
        state.all_true()
        state.edit_local(i=0, deploy=False)
        state.restart(i=0, deploy=True)
        state.all_true()
        state.stop(i=0)
        state.all_true()
    finally:
        state.teardown()
