"""README's first command runs the demo: keep it true."""

import json


def test_demo_tells_the_whole_story(cli):
    rc, doc = cli.json("demo", timeout=180)
    assert rc == 0, doc
    steps = {s["step"]: s["ok"] for s in doc["result"]["steps"]}
    assert all(steps.values()), steps
    assert {"start", "status", "metrics", "restart", "nan caught by watch", "lint", "crash", "stop",
            "checkpoint"} <= set(steps)
