"""One secret-proved handshake to node 0 (agent/core/nodeproof.py), spoken by the peers link and
the restart's GPU gate: each side's proof is the standard library's HMAC of its own text, a
proof of one realm or role is never one of another, and a hello from outside the run is not
answered."""

from __future__ import annotations

import hashlib
import hmac

from runward.agent.core import nodeproof
from runward.agent.core.nodeproof import GATE, PEERS

MN = {"id": "run-7f3a", "secret": "s3cret-of-the-run", "nnodes": 3}


def _stdlib(text: str) -> str:
    return hmac.new(MN["secret"].encode(), text.encode(), hashlib.sha256).hexdigest()


def test_a_member_and_node_0_prove_the_secret_to_each_other_in_either_realm():
    for realm, word, texts in ((PEERS, "hello", ("runward-peers coordinator", "runward-peers member")),
                               (GATE, "gate", ("runward-gate gate-coordinator", "runward-gate gate-member"))):
        said, nm = nodeproof.hello(realm, MN, 2)
        assert said == {word: 2, "id": MN["id"], "nonce": nm} and len(nm) == 32
        st, welcome = nodeproof.welcome(realm, MN, said)
        assert welcome["proof"] == _stdlib("%s %s 2 %s %s" % (texts[0], MN["id"], nm, st["nc"])), realm.tag
        proof = nodeproof.answer(realm, MN, 2, nm, welcome)
        assert proof == {"proof": _stdlib("%s %s 2 %s %s" % (texts[1], MN["id"], nm, st["nc"]))}
        assert nodeproof.proved(realm, MN, st, proof)
        # the other realm's words prove nothing here, nor node 0's proof a member's
        other = GATE if realm is PEERS else PEERS
        assert not nodeproof.proved(realm, MN, st, {"proof": nodeproof.mac(other, MN, "member", 2, nm, st["nc"])})
        assert not nodeproof.proved(realm, MN, st, {"proof": welcome["proof"]})


def test_a_welcome_without_the_secret_is_not_heeded():
    said, nm = nodeproof.hello(PEERS, MN, 1)
    st, welcome = nodeproof.welcome(PEERS, dict(MN, secret="another"), said)
    assert nodeproof.answer(PEERS, MN, 1, nm, welcome) is None
    assert nodeproof.answer(PEERS, MN, 1, nm, {"nonce": st["nc"]}) is None


def test_only_this_runs_hello_from_a_member_rank_is_answered():
    said, _ = nodeproof.hello(GATE, MN, 1)
    assert nodeproof.welcome(GATE, MN, said) is not None
    for bad in (dict(said, id="another-run"), dict(said, gate=0), dict(said, gate=3), dict(said, gate="1"),
                dict(said, nonce="short"), dict(said, nonce="n" * 129), {"hello": 1, "id": MN["id"], "nonce": "n" * 32}):
        assert nodeproof.welcome(GATE, MN, bad) is None, bad
