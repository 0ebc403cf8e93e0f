"""stop --checkpoint and restart --checkpoint (issue 29) crossed with the container targets:
the checkpoint signal reaches the job inside an ssh+podman container and an ssh+pct (LXC)
one, the saved line is waited for in the log there, the stop then verified, and the new
attempt of a restart runs. A job of our own (python3 -c) that saves on USR1, so the saved
path is known; each test's state under a home of its own on the testbed host."""

from __future__ import annotations

import pytest

from helpers_targets import _kill_marked, rcli, tb  # noqa: F401 - fixtures

JOB = ("import signal,sys,time\n"
       "n=[0]\n"
       "def save(s,f):\n n[0]+=1\n print('saved checkpoint ck%d' % n[0], flush=True)\n"
       "signal.signal(signal.SIGUSR1, save)\n"
       "print('step 1', flush=True)\n"
       "while True: time.sleep(0.05)\n")


@pytest.mark.parametrize("on", ["h1pod", "h1pct"])
@pytest.mark.parametrize("verb", ["stop", "restart"])
def test_checkpoint_first_on_a_container_target(rcli, on, verb):
    name = f"ck{verb[:2]}{on}"
    try:
        rc, doc = rcli.json("start", name, "--on", on, "--settle", "0.3", "--ready", "^step 1", "--",
                            "python3", "-c", JOB)
        assert rc == 0, doc
        rc, doc = rcli.json(verb, name, "--on", on, "--checkpoint", "--checkpoint-wait-for",
                            r"saved checkpoint (\S+)", "--checkpoint-timeout", "30", timeout=120)
        assert rc == 0, doc
        res = doc["result"]["steps"][0]["result"] if verb == "restart" else doc["result"]
        ck = res["checkpoint"]
        assert "saved checkpoint ck1" in ck["saw_line"] and ck["sent_to"] and not ck.get("timed_out"), ck
        assert res["verified_dead"], res
        rc, logs = rcli.json("logs", name, "--on", on, "-n", "50")
        assert rc == 0 and any("saved checkpoint ck1" in ln for ln in logs["result"]["lines"]), logs
        rc, sdoc = rcli.json("status", name, "--on", on)
        want = ("running", 2) if verb == "restart" else ("exited", 1)  # a stopped run reads exited, stopped by us
        got = sdoc["result"]["runs"][0]
        assert (got["state"], got["attempt"]) == want, got
    finally:
        rcli.run("stop", name, "--on", on, "--grace", "2")
        _kill_marked(name + ".")
