"""A multi-node run's stop while node 1 is cut off (a partition: the CLI cannot reach node 1
and node 1 cannot reach node 0), on real testbed hosts rw1 and rw2 (docs/multinode.md,
"Stop under a partition"). The cut is narrow, so that other runs on those hosts go on: the
run's own two ports dropped in rw2's network namespace (iptables), and the CLI's ssh to rw2
sent to the testbed's black-hole address. Ground truth from /proc and the nodes' records."""

from __future__ import annotations

import json
import subprocess
import time

import testbed
from conftest import marked, wait_for
from helpers_multinode import _config, _rows, mn  # noqa: F401 (mn: the fixture)

NS = ["nsenter", "--net=/run/netns/runward-rw2"]


def _iptables(op: str, res: dict) -> None:
    ports = f"{res['master_port']},{res['coord_port']}"
    for rule in (["INPUT", "-s", "10.200.1.2", "-p", "tcp", "-m", "multiport", "--sports", ports, "-j", "DROP"],
                 ["OUTPUT", "-d", "10.200.1.2", "-p", "tcp", "-m", "multiport", "--dports", ports, "-j", "DROP"]):
        subprocess.run(NS + ["iptables", op, *rule], check=True, capture_output=True, timeout=10)


def _cut_ssh_config(tmp_path, tb) -> str:
    """The testbed's ssh config with rw2 at an address that drops every packet."""
    text = open(tb["ssh_config"]).read().replace("HostName 10.200.2.2", "HostName 10.200.101.2\n  ConnectTimeout 2")
    p = tmp_path / "ssh_config_cut"
    p.write_text(text)
    return str(p)


# The link's windows these tests wait out, shortened through the nodes' agents (supervise/peers.py): a
# keepalive verdict 2 + 1 x 3 = 3-5 s after the cut (not 15-25 s), a rejoin window of 12 s
# (not 30 s). The sequence of events each test asserts is the same at either scale.
KEEP_IDLE_S, KEEP_INTVL_S, KEEP_CNT, REJOIN_S = 2, 1, 3, 12


def _fast_config(tmp_path, mn) -> None:
    """test_multinode's two-node config, each node's agent started by a python wrapper that sets
    the short windows (the hosts share this machine's files; the shim keeps RUNWARD_PEERS_*)."""
    _config(tmp_path, ["rw1", "rw2"], mn)
    py = tmp_path / "py-fast-link"
    py.write_text(f"#!/bin/sh\nexport RUNWARD_PEERS_KEEPALIVE={KEEP_IDLE_S},{KEEP_INTVL_S},{KEEP_CNT} "
                  f"RUNWARD_PEERS_REJOIN_S={REJOIN_S}\nexec python3 \"$@\"\n")
    py.chmod(0o755)
    toml = tmp_path / "work" / "runward.toml"
    toml.write_text("".join(line + (f'python = "{py}"\n' if line.startswith("home = ") else "")
                            for line in toml.read_text().splitlines(True)))


def _record(tmp_path, rank: int, name: str) -> dict:
    return json.loads((tmp_path / f"node{rank}" / "runs" / name / "attempts" / "1.json").read_text())


def test_a_stop_that_cannot_reach_node_1_is_finished_once_the_link_is_back(cli, tmp_path, mn):  # noqa: F811
    tb = testbed.require("ssh")
    _config(tmp_path, ["rw1", "rw2"], mn)  # the default windows: the cut ends before the keepalive's verdict
    rc, doc = cli.json("start", mn)
    assert rc == 0, doc
    res = doc["result"]
    wait_for(lambda: "allreduce step 3" in (tmp_path / "node1" / "runs" / mn / "log").read_text(), 60, "steps")
    job1 = _record(tmp_path, 1, mn)["job"]["pid"]
    good = cli.env["RUNWARD_SSH_CONFIG"]
    _iptables("-I", res)
    try:
        cli.env["RUNWARD_SSH_CONFIG"] = _cut_ssh_config(tmp_path, tb)
        p = cli.run("stop", mn, "--grace", "5")
        assert job1 in marked(mn + ".1"), "node 1's job runs on, cut off (by /proc)"
    finally:
        _iptables("-D", res)
        cli.env["RUNWARD_SSH_CONFIG"] = good
    back = time.monotonic()
    assert p.returncode == 3, (p.stdout, p.stderr)
    lines = p.stdout.splitlines()
    assert "node 0" in lines[1] and "stopped by runward stop" in lines[1] and "verified dead" in lines[1], p.stdout
    assert "node 1" in lines[2] and "Unreachable" in lines[2], p.stdout
    note = next(ln for ln in lines if ln.startswith("note: "))
    assert "node 1" in note and "may still run" in note and f"runward stop {mn}" in note, note
    assert not _record(tmp_path, 0, mn)["stopped"].get("survivors"), "node 0 was stopped, by its record"
    # the link is back: node 1's shim finishes the stop that could not reach it
    wait_for(lambda: job1 not in marked(mn + ".1"), 45, "node 1's job to end once the link is back")
    print("node 1 ended %.1fs after the link came back" % (time.monotonic() - back))
    wait_for(lambda: _record(tmp_path, 1, mn).get("exit"), 15, "node 1's shim to record the end")
    rc, st = cli.json("status", mn)
    assert rc == 0 and [r["run"]["state"] for r in _rows(st)] != ["running"] * 2, st
    assert _rows(st)[1]["run"]["state"] not in ("running", "starting"), st
    assert _record(tmp_path, 1, mn)["peer_stop"]["whole"], "node 0's stop reached node 1's shim over the link"
    p = cli.run("status", mn)
    lines = p.stdout.splitlines()
    assert "stopped by runward stop" in lines[1], p.stdout
    assert "node 0 was stopped by `runward stop`" in lines[2] and "failed" not in lines[2], p.stdout


def test_node_1_cut_off_from_node_0_stops_itself_within_its_keepalive(cli, tmp_path, mn):  # noqa: F811
    """The cut lasts: node 0's stop cannot reach node 1 at all, neither from the CLI nor over
    the nodes' link. Node 1's shim finds its link broken (TCP keepalive on its link,
    KEEP_* above: 3-5 s), finds no coordinator to rejoin (REJOIN_S above: 12 s) and, with
    on_node_failure = "stop", stops its job, the cut still in place (by /proc), its record
    saying the coordinator was lost."""
    tb = testbed.require("ssh")
    _fast_config(tmp_path, mn)
    rc, doc = cli.json("start", mn)
    assert rc == 0, doc
    res = doc["result"]
    wait_for(lambda: "allreduce step 3" in (tmp_path / "node1" / "runs" / mn / "log").read_text(), 60, "steps")
    job1 = _record(tmp_path, 1, mn)["job"]["pid"]
    good = cli.env["RUNWARD_SSH_CONFIG"]
    _iptables("-I", res)
    try:
        cut = time.monotonic()
        cli.env["RUNWARD_SSH_CONFIG"] = _cut_ssh_config(tmp_path, tb)
        p = cli.run("stop", mn, "--grace", "5")
        assert p.returncode == 3 and job1 in marked(mn + ".1"), (p.stdout, p.stderr)
        wait_for(lambda: job1 not in marked(mn + ".1"), 90, "node 1's job to end, cut off")
        print("node 1 ended %.1fs after the cut" % (time.monotonic() - cut))
        lost = _record(tmp_path, 1, mn).get("coordinator_lost")
        assert lost and f"no coordinator to rejoin within {REJOIN_S}s" in json.dumps(lost), _record(tmp_path, 1, mn)
    finally:
        _iptables("-D", res)
        cli.env["RUNWARD_SSH_CONFIG"] = good


def test_a_link_hiccup_shorter_than_the_rejoin_window_stops_nothing(cli, tmp_path, mn):  # noqa: F811
    """The link between node 1 and node 0 drops every packet for 8 s, then comes back; both
    jobs are healthy all along (their own connection only waits). Node 1's keepalive finds the
    link dead (within 3-5 s of the cut: KEEP_* above) but node 0's coordinator is still there
    (the cut ends inside the 12 s rejoin window): node 1's
    shim rejoins it once the link is back and stops nothing (by /proc: both jobs run on and
    their all-reduce goes on; neither record asks for a stop). On the old code node 1's shim
    stopped its job at the keepalive's verdict while node 0 ran on alone, unaware."""
    testbed.require("ssh")
    _fast_config(tmp_path, mn)  # on_node_failure = "stop", the default
    rc, doc = cli.json("start", mn)
    assert rc == 0, doc
    res = doc["result"]
    wait_for(lambda: "allreduce step 3" in (tmp_path / "node1" / "runs" / mn / "log").read_text(), 60, "steps")
    jobs = [_record(tmp_path, r, mn)["job"]["pid"] for r in (0, 1)]
    _iptables("-I", res)
    try:
        time.sleep(KEEP_IDLE_S + KEEP_INTVL_S * KEEP_CNT + 3)  # past the keepalive's verdict, inside the rejoin window
    finally:
        _iptables("-D", res)
    steps = (tmp_path / "node1" / "runs" / mn / "log").read_text().count("allreduce step")
    # the ranks' own connection resumes at its next retransmission (TCP's backoff: up to ~25 s)
    wait_for(lambda: (tmp_path / "node1" / "runs" / mn / "log").read_text().count("allreduce step") > steps
             or not all(j in marked(mn + ".") for j in jobs), 60, "the ranks to talk again")
    time.sleep(3)
    alive_now = marked(mn + ".")
    assert all(j in alive_now for j in jobs), ([j in alive_now for j in jobs], _record(tmp_path, 1, mn))
    assert (tmp_path / "node1" / "runs" / mn / "log").read_text().count("allreduce step") > steps, "they talk again"
    for r in (0, 1):
        rec = _record(tmp_path, r, mn)
        assert not rec.get("stop_requested") and not rec.get("peer_stop") and not rec.get("coordinator_lost"), rec
    assert any("rejoined" in (e.get("why") or "") for e in _record(tmp_path, 1, mn).get("peer_events", [])), \
        "node 1's record says the link dropped and it rejoined"
