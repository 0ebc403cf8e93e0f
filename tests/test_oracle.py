"""The model-based oracle's CI profile (issue 26; docs/testing.md): a fixed seed, a few
examples of ~20 rules per target kind, every invariant after every rule, over real targets.
Combinations runward gets wrong today are in tests/oracle/model.py KNOWN_HOLES and are not
walked here; `scripts/oracle --holes` walks them. A failure prints the seed and the failing
sequence of rules; `scripts/oracle --seed S --targets KIND` shrinks it."""

from __future__ import annotations

import pytest

from oracle import machine, soak, world

SEED = 20261204
EXAMPLES = 6          # the first is hypothesis' simplest (a start or two)
PER_EXAMPLE = 20


@pytest.mark.parametrize("kind", ["local", "ssh", "podman"])
def test_oracle_ci_profile(kind):
    why = world.why_not(kind)
    if why:
        pytest.skip(why)
    machine.STATS.update(steps=0, checks=0, verbs=0)
    found = soak.run_once([kind], SEED, EXAMPLES, PER_EXAMPLE, holes=False, shrink=False)
    assert found is None, found
    print("oracle %s: %s" % (kind, machine.STATS))
    assert machine.STATS["steps"] >= EXAMPLES, machine.STATS   # the rules acted, not only no-ops
