"""A baseline rule over ssh into a podman container (issue 30): after a deploy and restarts
there, `watch` fires below_baseline on a slower attempt and not on an equal one. Ground truth:
the speeds the example job printed in the container (TRAIN_TOKS sets them), read from its
own log lines."""

from __future__ import annotations

import statistics
import uuid

import pytest

from conftest import EXAMPLE, env_flags, exited_attempt
from helpers_ledger import FAST, _attempt_lines, _printed_tok_s, _steps_past, _watch
from podjob import pod  # noqa: F401  (the fixture)


def test_a_baseline_rule_over_ssh_into_a_container_fires_only_on_the_slower_attempt(pod):  # noqa: F811
    name = f"bp{uuid.uuid4().hex[:6]}"
    dest = f"{pod.dir}/code"
    (pod.cwd / "train.py").write_bytes(EXAMPLE.read_bytes())
    env = ", ".join(f'{k} = "{v}"' for k, v in (kv.split("=") for kv in FAST + ["TRAIN_TOKS=14500"]))
    toml = (f'[targets.h1pod]\non = "ssh://rw1/podman:{pod.container}"\nhome = "{pod.dir}/home"\n\n'
            f'[runs.{name}]\non = "h1pod"\ncommand = ["python3", "{dest}/train.py"]\ncwd = "{dest}"\n'
            f'files = ["train.py:{dest}/train.py"]\nsettle = 0.3\nenv = {{ {env} }}\n\n'
            f'[runs.{name}.health]\ntok_s = {{ min_ratio = 0.95, baseline = "best" }}\n')
    (pod.cwd / "runward.toml").write_text(toml)
    try:
        rc, doc = pod.json("deploy", name)
        assert rc == 0, doc
        rc, doc = pod.json("start", name)
        assert rc == 0, doc
        exited_attempt(pod, name, 1)
        rc, doc = pod.json("restart", name, "--deploy", *env_flags("TRAIN_TOKS=9000", "TRAIN_STEPS=0"))
        assert rc == 0, doc
        _steps_past(pod, name, 2, 12)
        rc, doc = _watch(pod, name, "30")
        assert rc == 1 and doc["result"]["alert"]["kind"] == "below_baseline", doc
        al = doc["result"]["alert"]
        printed = [statistics.median(_printed_tok_s(_attempt_lines(pod, name, n))[5:]) for n in (1, 2)]
        assert printed[1] / printed[0] == pytest.approx(9000 / 14500, rel=0.05)  # what the job really did
        assert al["baseline"] == 1 and al["ratio"] == pytest.approx(printed[1] / printed[0], rel=0.05), al
        rc, doc = pod.json("restart", name, *env_flags("TRAIN_TOKS=14500", "TRAIN_STEPS=0"))
        assert rc == 0, doc
        _steps_past(pod, name, 3, 12)
        rc, doc = _watch(pod, name, "3")
        assert rc == 0 and doc["result"]["healthy"], doc
        seen = doc["result"]["baseline"]["tok_s"]
        assert seen["baseline"] == 1 and seen["ratio"] == pytest.approx(1.0, rel=0.05), seen  # judged, not skipped
    finally:
        pod.json("stop", name, "--grace", "2")
