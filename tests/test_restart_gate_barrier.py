"""Hostile black-box review of eb6f73b (a multi-node `restart` passes the GPU gate; issue 29).

Each test sets up real ssh testbed nodes (rw1.., each with its own nvidia-smi stand-in, as in
tests/test_restart_gate_nodes.py), makes a node's GPU held by a real process, and then reads
ground truth -- /proc, the attempt records under each node's home, the job's log -- against
what runward says. Each finding's test failed on eb6f73b and passes since the barrier was rebuilt (agent/supervise/gatebarrier.py)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time

import fakegpu
from conftest import alive, wait_for
from gatenodes import (Holders, both_run, env, free, happens, in_rw2, record, restart_blocked,  # noqa: F401 (env: the fixture)
                       shim_alive, start_run)
from helpers_restart_gate import _config


def test_node0_held_instead_of_node1_blocks_then_all_start(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[0])
    doc = restart_blocked(cli, name)
    assert str(holder.pid) in doc["error"]["message"], doc
    wait_for(lambda: record(tmp_path, 1, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 1's own release")
    assert not record(tmp_path, 0, name, 2).get("job") and not record(tmp_path, 1, name, 2).get("job")
    freed = time.time()
    free(holder)
    both_run(tmp_path, name, 2)
    assert all(record(tmp_path, i, name, 2)["started_at"] >= freed for i in (0, 1))
    rc, st = cli.json("status", name)
    assert rc == 0 and st["result"]["state"] == "running", st


class Stranger:
    """Someone on the network who opens a connection to node 0's coordinator port and says
    nothing (a port scanner, a load balancer's health check): kept open, a fresh one every
    second so that one younger than HELLO_S is always there."""

    def __init__(self, addr):
        self.addr, self.socks, self.connected = addr, [], 0
        self.done = threading.Event()
        self.t = threading.Thread(target=self._loop, daemon=True)
        self.t.start()

    def _loop(self):
        while not self.done.is_set():
            try:
                self.socks.append(socket.create_connection(self.addr, timeout=2))
                self.connected += 1
            except OSError:
                pass
            self.done.wait(1.0)

    def close(self):
        self.done.set()
        self.t.join()
        for s in self.socks:
            s.close()


def test_a_silent_stranger_on_the_coordinator_port_does_not_stop_the_start(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    mn = record(tmp_path, 0, name, 2)["multinode"]
    st = Stranger((mn["master_addr"], int(mn["coord_port"])))
    try:
        wait_for(lambda: st.connected >= 2, 20, "the stranger to connect to node 0's coordinator port")
        free(holder)
        both_run(tmp_path, name, 2)
    finally:
        st.close()
        for i in (0, 1):
            a = record(tmp_path, i, name, 2)
            print("node", i, {k: a.get(k) for k in ("blocked", "error", "exit", "job")}, "shim alive", shim_alive(a))
        print("STATUS", cli.run("status", name).stdout)
        print("LOG0", (tmp_path / "node0" / "runs" / name / "log").read_text()[-1500:])


def _status(cli, name):
    rc, st = cli.json("status", name)
    return rc, st["result"], cli.run("status", name).stdout


def test_both_held_released_one_after_the_other_status_tells_the_truth(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    hold0, hold1 = h.hold(states[0]), h.hold(states[1])
    doc = restart_blocked(cli, name)
    assert str(hold0.pid) in doc["error"]["message"] and str(hold1.pid) in doc["error"]["message"], doc
    free(hold1)
    wait_for(lambda: record(tmp_path, 1, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 1's own release")
    assert not alive(hold1.pid)
    rc, res, text = _status(cli, name)
    print(text)
    assert not record(tmp_path, 0, name, 2).get("job") and not record(tmp_path, 1, name, 2).get("job")
    assert [r["state"] for r in res["nodes"]] == ["blocked", "blocked"], res
    # ground truth: pid hold1 is gone and node 1's GPU is free; runward must not say it still holds it
    assert str(hold1.pid) not in res["nodes"][1]["run"]["blocked"]["why"], res["nodes"][1]["run"]["blocked"]
    assert "pid %d" % hold1.pid not in text, text
    free(hold0)
    both_run(tmp_path, name, 2)


def test_three_nodes_the_last_held_all_start_together(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name, 3)
    start_run(cli, name)
    holder = h.hold(states[2])
    restart_blocked(cli, name)
    for i in (0, 1):
        wait_for(lambda: record(tmp_path, i, name, 2).get("blocked", {}).get("own_released_at"), 30, f"node {i}'s own release")
    assert not any(record(tmp_path, i, name, 2).get("job") for i in range(3))
    rc, res, text = _status(cli, name)
    assert res["state"] == "blocked", text
    free(holder)
    both_run(tmp_path, name, 2, nnodes=3)
    rc, res, text = _status(cli, name)
    assert rc == 0 and res["state"] == "running", text


def test_kill9_of_one_nodes_waiting_shim(cli, tmp_path, env):
    """Node 1's waiting shim killed (OOM killer, a reboot of that host): node 1 will never
    start, so node 0 must not start alone, and status must not call the run blocked-and-coming."""
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    shim1 = record(tmp_path, 1, name, 2)["shim"]
    os.kill(shim1["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(shim1["pid"], shim1.get("start")), 10, "node 1's shim to die")
    rc, res, text = _status(cli, name)
    print(text)
    free(holder)
    assert not record(tmp_path, 0, name, 2).get("job"), "node 0 started alone"
    rc, res2, text2 = _status(cli, name)
    print(text2)
    assert res["nodes"][1]["state"] != "blocked", text
    assert res["state"] not in ("blocked", "running"), text
    assert res2["state"] not in ("blocked", "running"), text2


def test_stop_on_one_node_while_blocked(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    p = cli.run("stop", name, "--on", "n1")
    print(p.returncode, p.stdout, p.stderr)
    wait_for(lambda: not shim_alive(record(tmp_path, 1, name, 2)), 15, "node 1's shim to end")
    free(holder)
    rc, res, text = _status(cli, name)
    print(text)
    assert not record(tmp_path, 0, name, 2).get("job"), "node 0 started alone"
    # node 1 was cancelled: node 0 can never start; status must not call node 0 blocked-and-coming
    assert res["state"] != "blocked", text
    assert res["nodes"][0]["state"] != "blocked" or shim_alive(record(tmp_path, 0, name, 2)) is False, text


def test_a_second_restart_while_blocked_blocks_again(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    shims = [record(tmp_path, i, name, 2)["shim"] for i in (0, 1)]
    rc, doc = cli.json("restart", name, "--gpu-release-timeout", "0.5", timeout=120)
    print(rc, json.dumps(doc)[:3000])
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    assert not any(alive(s["pid"], s.get("start")) for s in shims)
    assert not any(record(tmp_path, i, name, 3).get("job") for i in (0, 1)), "a node started while node 1's GPU is held"
    for i in (0, 1):
        assert record(tmp_path, i, name, 2)["blocked"].get("cancelled_at") and not record(tmp_path, i, name, 2).get("job")
    free(holder)
    both_run(tmp_path, name, 3)


def test_released_at_the_moment_of_the_restart_every_node_starts(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    p = subprocess.Popen(["sleep", "300"])
    h.procs.append(p)
    fakegpu.attach(states[1], 1, p.pid, 2000, release_delay=1.0)  # the driver frees it 1 s after death
    free(p)  # dead now: freed about as the restart's stop gives up (0.5 s) and the start begins
    rc, doc = cli.json("restart", name, "--gpu-release-timeout", "0.5", timeout=120)
    assert rc in (0, 5), doc
    both_run(tmp_path, name, 2)
    rc, st = cli.json("status", name)
    assert rc == 0 and st["result"]["state"] == "running", st


def test_restart_deploy_while_a_gpu_is_held_deploys_then_blocks_then_starts(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    src = cli.cwd / "payload.txt"
    src.write_text("v1\n")
    dest = tmp_path / "deployed" / "payload.txt"
    with open(cli.cwd / "runward.toml", "a") as f:
        f.write(f'files = ["payload.txt:{dest}"]\n')
    assert cli.json("deploy", name)[0] == 0
    start_run(cli, name)
    holder = h.hold(states[1])
    src.write_text("v2\n")
    rc, doc = cli.json("restart", name, "--deploy", "--gpu-release-timeout", "0.5", timeout=120)
    assert rc == 5 and doc["result"]["state"] == "blocked", doc
    assert dest.read_text() == "v2\n"
    assert not any(record(tmp_path, i, name, 2).get("job") for i in (0, 1))
    free(holder)
    both_run(tmp_path, name, 2)


def test_sigint_of_the_cli_during_a_blocked_restart_leaves_no_orphan_waiter(cli, tmp_path, env):
    """Ctrl-C as the start of the blocked attempts is under way: whatever the CLI says, a
    waiting shim left on a node must be one that status reports (never nothing-started)."""
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    p = cli.popen("restart", name, "--json", "--gpu-release-timeout", "0.5")
    wait_for(lambda: any((tmp_path / f"node{i}" / "runs" / name / "attempts" / "2.json").exists() for i in (0, 1)),
             60, "the blocked attempt's record on some node")
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    print(p.returncode, out[-3000:], err[-2000:])
    waiting = [i for i in (0, 1) if shim_alive(record(tmp_path, i, name, 2))]
    rc, res, text = _status(cli, name)
    print(waiting, text)
    if p.returncode != 5:  # the CLI did not say blocked: then nothing may wait to start on any node
        assert not waiting, (p.returncode, out, text)
    free(holder)
    if waiting:
        both_run(tmp_path, name, 2)


SQUAT = ("import socket,sys\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
         "s.bind((sys.argv[1],int(sys.argv[2])))\ns.listen(8)\nprint('bound',flush=True)\nsys.stdin.read()\n")


def test_node0_holds_the_coordinator_port_while_its_own_gpu_is_held(cli, tmp_path, env):
    """Found on eb6f73b: nobody listened on the coordinator port while node 0 waited for its
    own GPU, so another program could take it and node 0 then waited silently while status
    blamed a dead GPU holder. Now node 0's shim holds the port from the start of the wait:
    another program's bind is refused (EADDRINUSE), and once the GPU is released every node
    starts."""
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[0])
    restart_blocked(cli, name)
    mn = record(tmp_path, 0, name, 2)["multinode"]
    sq = subprocess.run(["nsenter", "--net=/run/netns/runward-rw1", "python3", "-c", SQUAT,
                         mn["master_addr"], str(mn["coord_port"])], input="", capture_output=True, text=True,
                        timeout=30)
    assert sq.returncode != 0 and "Address already in use" in sq.stderr, (sq.stdout, sq.stderr)
    free(holder)
    both_run(tmp_path, name, 2)


def test_no_job_is_forked_on_a_gpu_taken_while_the_node_waited_for_the_others(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    first = h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    second = h.hold(states[0])  # another user's job takes node 0's GPU 1 while node 0 waits for node 1
    free(first)
    wait_for(lambda: record(tmp_path, 1, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 1's own release")
    forked = happens(lambda: record(tmp_path, 0, name, 2).get("job"), 10)
    assert alive(second.pid)
    assert not forked, "node 0's job was forked while pid %d holds its GPU 1 (%s)" % (
        second.pid, fakegpu.query_apps(states[0]))
    free(second)
    both_run(tmp_path, name, 2)


def test_status_all_does_not_say_a_free_node_waits_for_its_gpus(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    assert fakegpu.query_apps(states[0]) == []  # ground truth: nothing on node 0's GPUs
    p = cli.run("status", "--all")
    section = p.stdout.split("== n0 (ssh://rw1)", 1)[1].split("== n1", 1)[0]
    line = next(ln for ln in section.splitlines() if ln.startswith(name))
    assert "blocked" in line, section
    assert "waiting for its GPUs" not in line, line


def test_start_while_blocked_says_blocked_not_rolled_back(cli, tmp_path, env):
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    p = cli.run("start", name)
    assert p.returncode != 0
    assert all(shim_alive(record(tmp_path, i, name, 2)) for i in (0, 1))  # ground truth: both still wait
    assert not (tmp_path / "node0" / "runs" / name / "attempts" / "3.json").exists()
    assert "pid None" not in p.stdout and "was stopped" not in p.stdout and "rolled back" not in p.stdout, p.stdout
    free(holder)
    both_run(tmp_path, name, 2)


def test_a_member_lost_without_a_fin_does_not_let_the_others_start_alone(cli, tmp_path, env):
    """Three nodes; node 2 held. Node 1, released, has proved itself at node 0's barrier; then
    node 1's host dies silently (its packets to the coordinator port dropped, its shim killed:
    a power loss as the network sees it). Once node 2 is released, no node may start: node 1
    never will, and the others would sit in their rendezvous."""
    name, h = env
    states = _config(tmp_path, name, 3)
    start_run(cli, name)
    holder = h.hold(states[2])
    restart_blocked(cli, name)
    mn = record(tmp_path, 0, name, 2)["multinode"]
    port = str(mn["coord_port"])
    est = lambda: port in in_rw2("ss", "-Htn", "state", "established", "dst", mn["master_addr"]).stdout  # noqa: E731
    wait_for(est, 30, "node 1 connected to node 0's barrier")
    rule = ["OUTPUT", "-p", "tcp", "--dport", port, "-j", "DROP"]
    assert in_rw2("iptables", "-I", *rule).returncode == 0
    try:
        shim1 = record(tmp_path, 1, name, 2)["shim"]
        os.kill(shim1["pid"], signal.SIGKILL)
        wait_for(lambda: not alive(shim1["pid"], shim1.get("start")), 10, "node 1's shim to die")
        free(holder)
        wait_for(lambda: record(tmp_path, 2, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 2's own release")
        started = happens(lambda: [i for i in (0, 2) if record(tmp_path, i, name, 2).get("job")], 10)
        assert not record(tmp_path, 1, name, 2).get("job")
        assert not started, "node 0/2 forked their jobs while node 1 is gone: " + cli.run("status", name).stdout
    finally:
        in_rw2("iptables", "-D", *rule)


def test_kill9_of_a_proved_member_three_nodes_nothing_starts(cli, tmp_path, env):
    """The control for the test above: node 1's shim killed with its host up (the kernel closes
    its connection): node 0 stops counting it, and nothing starts once node 2 is released."""
    name, h = env
    states = _config(tmp_path, name, 3)
    start_run(cli, name)
    holder = h.hold(states[2])
    restart_blocked(cli, name)
    mn = record(tmp_path, 0, name, 2)["multinode"]
    port = str(mn["coord_port"])
    wait_for(lambda: port in in_rw2("ss", "-Htn", "state", "established", "dst", mn["master_addr"]).stdout, 30,
             "node 1 connected to node 0's barrier")
    shim1 = record(tmp_path, 1, name, 2)["shim"]
    os.kill(shim1["pid"], signal.SIGKILL)
    wait_for(lambda: not alive(shim1["pid"], shim1.get("start")), 10, "node 1's shim to die")
    free(holder)
    wait_for(lambda: record(tmp_path, 2, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 2's own release")
    assert not happens(lambda: [i for i in (0, 2) if record(tmp_path, i, name, 2).get("job")], 10)


def test_a_driver_failure_on_the_held_node_is_not_a_release(cli, tmp_path, env):
    """nvidia-smi failing on the held node while it waits (unknown) must not read as released."""
    name, h = env
    states = _config(tmp_path, name)
    start_run(cli, name)
    holder = h.hold(states[1])
    restart_blocked(cli, name)
    wait_for(lambda: record(tmp_path, 0, name, 2).get("blocked", {}).get("own_released_at"), 30, "node 0's own release")
    fakegpu.update(states[1], lambda s: s.update(scenario="driver-failure"))  # nvidia-smi fails; the holder lives
    forked = happens(lambda: [i for i in (0, 1) if record(tmp_path, i, name, 2).get("job")], 10)
    assert alive(holder.pid)
    assert not forked, "a node forked its job while pid %d still holds node 1's GPU: %s" % (
        holder.pid, record(tmp_path, 1, name, 2).get("blocked"))
