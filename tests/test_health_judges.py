"""The health judges (a watch's window rules, stall and straggler, a baseline, idle GPUs) are
asked one way, poll(att, alive, now), and answer one way: a list of alerts as
logmetrics.alerts.alert makes them. A watch and the shim's health actions hold a list of
them and ask each in turn."""

from __future__ import annotations

import inspect
import time

from runward.agent.health.idle import IdleJudge
from runward.agent.logmetrics.alerts import alert
from runward.agent.health.baseline import BaselineJudge
from runward.agent.health.window import Judge
from runward.agent.health.stall import StallJudge

JUDGES = (Judge, StallJudge, BaselineJudge, IdleJudge)


def test_every_judge_is_asked_the_same_way():
    for cls in JUDGES:
        assert list(inspect.signature(cls.poll).parameters) == ["self", "att", "alive", "now"], cls


def test_a_judge_answers_with_alerts(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("".join("step %d loss %g tok/s 14500\n" % (i, 9.0 - i) for i in range(1, 8)))
    att = {"attempt": 1, "log": str(log), "log_offset": 0}
    now = time.time()
    judge = Judge(att, {}, {"min": {"loss": 4.0}}, now, None)
    got = judge.poll(att, True, now)
    assert [a["kind"] for a in got] == ["below_min"] and got[0]["metric"] == "loss", got
    assert set(got[0]) >= set(alert("below_min", now, "")), got[0]
    assert judge.poll(att, True, now) == []  # what it read is not judged again
    # a job that is not alive has no stall: asked the same way, it answers the same way
    assert StallJudge(None, {"stall_after": 1}).poll(att, False, now) == []
    assert IdleJudge(None, {"below": 5, "for_s": 1}).poll(dict(att, gpus=[0]), False, now) == []
