#!/usr/bin/env python3
"""A small job that behaves like a real training run, for runward's tests and demo.

Pure stdlib, Python >= 3.8; imports torch only to hold GPU memory, never needs it. Prints
`init pid=...`, then `ready`, then `step N loss X tok/s Y lr Z` lines. Switches (env):
  TRAIN_STEP_SECONDS 0.2  TRAIN_STEPS 0=forever (then `done`, exit 0)  TRAIN_TOKS 14500
  TRAIN_WORKERS 2  TRAIN_ESCAPEE 1 (one more worker: setsid + double fork)
  TRAIN_ESCAPEE_LINGER=1 escapee outlives main   TRAIN_IGNORE_TERM=1 worker 0 ignores TERM/INT
  TRAIN_LINGER_MAX_SECONDS 300 (cap on lingering)  TRAIN_PROFILE_INTERVAL N (`profile:` lines)
  TRAIN_CHECKPOINT_DIR ./checkpoints  TRAIN_CHECKPOINT_SECONDS 0.3 (on TERM/INT: save, exit 0)
  TRAIN_CRASH_AT N RuntimeError, exit 1   TRAIN_OOM_AT N torch-style CUDA OOM, exit 1
  TRAIN_NAN_AT N loss nan from N on       TRAIN_EXIT_AT N + TRAIN_EXIT_CODE K: exit K
  TRAIN_FAIL_FAST=1 exit 3 at once        TRAIN_STALL_AT N: silent from step N, stays alive
  TRAIN_SLOW_AFTER N + TRAIN_SLOW_FACTOR 0.5: tok/s drops   TRAIN_READY_LINE 1 (0: no `ready`)
  TRAIN_GPU_MIB / TRAIN_ESCAPEE_GPU_MIB N: hold N MiB (torch CUDA, else the nvidia-smi
  stand-in named by RUNWARD_FAKE_SMI_STATE; TRAIN_GPU_RELEASE_SECONDS: its release delay)
  TRAIN_CKPT_EVERY N: every N steps a checkpoint directory TRAIN_CKPT_ROOT/step_N (default
  ckpt), its state.json first, then the TRAIN_CKPT_MARKER file (COMPLETE; empty: none), then
  `saved checkpoint PATH`.  TRAIN_RESUME PATH: go on from that checkpoint's step (a path with
  no state.json: from step 0, said).  TRAIN_CRASH_AFTER N: RuntimeError N steps after the start
  or resume, exit 1.  TRAIN_CKPT_SIGNAL USR1: on that signal, save such a checkpoint (taking
  TRAIN_CHECKPOINT_SECONDS between its data and its marker) and go on training.
  TRAIN_SEED 0. Any other TRAIN_* (e.g. TRAIN_RUN_TAG) is only echoed on the init line.
Multi-node mode, when NNODES > 1 (runward sets NODE_RANK, NNODES, MASTER_ADDR, MASTER_PORT):
  a TCP rendezvous at MASTER_ADDR:MASTER_PORT (node 0 listens), then each step an all-reduce
  (sum) of the step counter between the ranks: `allreduce step N sum S nnodes K`. A lost peer
  makes the others wait, as NCCL would (TRAIN_PEER_LOSS=exit: exit 1 instead).
  TRAIN_RDZV_TIMEOUT 60   TRAIN_FAIL_RANK R: TRAIN_FAIL_FAST and TRAIN_CRASH_AT/TRAIN_EXIT_AT
  apply on rank R only.

Process tree (the shapes that defeat `pkill -f` and `kill $PID`):
    main -+- worker 0 .. N-1   same process group: `train.py --worker I FD`
          `- escapee            setsid() + double fork: own session, parent is init
Workers block reading a pipe whose only write end is in main; EOF means main is gone, for
any reason, and they exit, except the lingering ones above.
"""
import json
import math
import os
import random
import select
import signal
import socket
import subprocess
import sys
import time


def env_num(name, default, kind=float):
    raw = os.environ.get(name, "")
    if raw == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        sys.exit(f"error: {name}={raw!r} is not a valid {kind.__name__}")  # exit 1, names it


def say(line, stream=sys.stdout):
    print(line, file=stream, flush=True)  # flush: the log is read while we run


# --------------------------------------------------------------------------- GPU memory
_held = []  # keeps a torch tensor alive for the life of the process


def hold_gpu(mib):
    """Hold MIB MiB on the first visible GPU: real CUDA if torch has it, else the stand-in."""
    if mib <= 0:
        return
    try:
        import torch  # optional: only here, so the job never needs it
        if torch.cuda.is_available():
            _held.append(torch.empty(mib << 20, dtype=torch.uint8, device="cuda"))
            say(f"gpu: pid={os.getpid()} holds {mib} MiB on cuda:0 (torch)")
            return
    except ImportError:
        pass
    if os.environ.get("RUNWARD_FAKE_SMI_STATE"):
        # Tests without a GPU: register this real pid with whatever nvidia-smi is first on
        # PATH (tests/bin/nvidia-smi); its state file is the fake driver's memory.
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        argv = ["nvidia-smi", "--runward-fake-attach", first if first.isdigit() else "0",
                str(os.getpid()), str(mib)]
        if os.environ.get("TRAIN_GPU_RELEASE_SECONDS"):
            argv.append(os.environ["TRAIN_GPU_RELEASE_SECONDS"])
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        say(f"gpu: pid={os.getpid()} holds {mib} MiB on GPU {argv[2]} (nvidia-smi stand-in)")
        return
    say(f"gpu: no CUDA and no RUNWARD_FAKE_SMI_STATE; {mib} MiB not held", sys.stderr)


# --------------------------------------------------------------------------- workers
def worker_main(kind, index, alive_fd):
    """Idle like a dataloader worker until main is gone (EOF on alive_fd)."""
    stubborn = kind == "worker" and index == 0 and os.environ.get("TRAIN_IGNORE_TERM") == "1"
    linger = stubborn or (kind == "escapee" and os.environ.get("TRAIN_ESCAPEE_LINGER") == "1")
    for sig in (signal.SIGTERM, signal.SIGINT):
        # A stubborn worker models one stuck in a collective: only SIGKILL ends it. The
        # others leave at once (os._exit: nothing to clean up, safe at any moment).
        signal.signal(sig, signal.SIG_IGN if stubborn else (lambda *_: os._exit(0)))
    while os.read(alive_fd, 1):  # blocks in the kernel; b"" (EOF) means main is gone
        pass
    if linger:  # outlive main, as the real leaked worker does; bounded so tests never leak
        time.sleep(env_num("TRAIN_LINGER_MAX_SECONDS", 300.0))
    return 0


def escapee_main(alive_fd, report_fd):
    """setsid() and double fork, so the worker is in its own session with init as parent."""
    os.setsid()
    child = os.fork()
    if child:
        os.waitpid(child, 0)  # reap the middle process ourselves: no zombie left for init
        os._exit(0)
    if os.fork():
        os._exit(0)
    # its GPU memory is held before main hears from it: main steps on only then, so a crash at
    # step N leaves an escapee that holds the memory, however slow the attach (a loaded machine)
    hold_gpu(int(env_num("TRAIN_ESCAPEE_GPU_MIB", 0, int)))
    os.write(report_fd, b"%d\n" % os.getpid())  # tell main who we are, then forget it
    os.close(report_fd)
    return worker_main("escapee", 0, alive_fd)


def spawn_workers(count, escapee):
    """Start the workers; return (Popen list, escapee pid or None, write end of alive pipe)."""
    alive_r, alive_w = os.pipe()  # non-inheritable: only alive_r is passed on, by pass_fds
    me = [sys.executable, os.path.abspath(__file__)]
    workers = [subprocess.Popen(me + ["--worker", str(i), str(alive_r)], pass_fds=(alive_r,))
               for i in range(count)]
    escapee_pid = None
    if escapee:
        report_r, report_w = os.pipe()
        first = subprocess.Popen(me + ["--escapee", str(alive_r), str(report_w)],
                                 pass_fds=(alive_r, report_w))
        os.close(report_w)
        if select.select([report_r], [], [], 60.0)[0]:  # its GPU attach (CUDA init) first
            escapee_pid = int(os.read(report_r, 32) or 0) or None
        os.close(report_r)
        first.wait()  # the session leader exits at once; its grandchild is the escapee
    os.close(alive_r)
    return workers, escapee_pid, alive_w


def stop_workers(workers, alive_w, grace=1.0):
    """Close the alive pipe (workers exit on EOF), send TERM, wait a bounded time."""
    try:
        os.close(alive_w)
    except OSError:
        pass
    deadline = time.monotonic() + grace
    for proc in workers:
        if proc.poll() is None:
            proc.terminate()
    for proc in workers:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say(f"warning: worker pid={proc.pid} did not stop; leaving it", sys.stderr)


# --------------------------------------------------------------------------- failures
class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError: the traceback's last line reads the same."""


OutOfMemoryError.__module__ = "torch"

# The message of PyTorch >= 2.4's caching allocator, spacing included (two spaces before
# "See" and after "Management"), as quoted in pytorch/pytorch#16417, murong-xu/CADS#4.
OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB"
    " of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.86 GiB"
    " memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.95 GiB"
    " is reserved by PyTorch but unallocated. If reserved but unallocated memory is large"
    " try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. "
    " See documentation for Memory Management "
    " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")


def allocate_activations(step):
    raise OutOfMemoryError(OOM_MESSAGE)


def forward(step, crash_at, oom_at):
    if step == crash_at:
        raise RuntimeError(f"simulated failure in forward pass at step {step} (TRAIN_CRASH_AT)")
    if step == oom_at:
        allocate_activations(step)


# --------------------------------------------------------------------------- multi-node
class Interrupted(Exception):
    """A stop signal came during the rendezvous."""


class Ranks:
    """The ranks of a multi-node run, over plain TCP: node 0 accepts one connection from
    each other rank; an all-reduce is gather to node 0, sum, send back (JSON lines)."""

    def __init__(self, rank, nnodes, addr, port, timeout, wake_r):
        self.rank, self.nnodes, self.wake_r = rank, nnodes, wake_r
        self.peers, self.bufs = [], {}
        deadline = time.monotonic() + timeout
        if rank == 0:
            srv = socket.socket()
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            srv.bind(("", port))
            srv.listen(nnodes)
            while len(self.peers) < nnodes - 1:
                left = deadline - time.monotonic()
                r = select.select([srv, wake_r], [], [], max(0.0, left))[0]
                if wake_r in r:
                    raise Interrupted()
                if not r:
                    raise TimeoutError(f"rendezvous: {len(self.peers) + 1} of {nnodes} ranks after {timeout:g}s")
                self.peers.append(srv.accept()[0])
            srv.close()
        else:
            while True:
                try:
                    self.peers.append(socket.create_connection((addr, port), timeout=2.0))
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    # node 0 may not listen yet: a rendezvous retries; a signal ends the wait
                    if select.select([wake_r], [], [], 0.2)[0]:
                        raise Interrupted()
        for p in self.peers:
            p.settimeout(None)
            self.bufs[p] = b""

    def _recv(self, p):
        """One line from peer p; None if p is gone; while waiting, a signal returns ""."""
        while b"\n" not in self.bufs[p]:
            r = select.select([p, self.wake_r], [], [])[0]
            if self.wake_r in r:
                return ""
            try:
                chunk = p.recv(4096)
            except OSError:  # reset by a peer that died
                chunk = b""
            if not chunk:
                return None
            self.bufs[p] += chunk
        line, self.bufs[p] = self.bufs[p].split(b"\n", 1)
        return line.decode()

    def allreduce(self, value):
        """The sum of value over all ranks; None if a peer is gone, "" if a signal came."""
        if self.rank == 0:
            total = value
            for p in self.peers:
                got = self._recv(p)
                if not got:
                    return got
                total += int(got)
            try:
                for p in self.peers:
                    p.sendall(b"%d\n" % total)
            except OSError:
                return None
            return total
        try:
            self.peers[0].sendall(b"%d\n" % value)
        except OSError:
            return None
        got = self._recv(self.peers[0])
        return int(got) if got else got


def join_ranks(wake_r):
    nnodes = env_num("NNODES", 1, int)
    if nnodes < 2:
        return None
    rank = env_num("NODE_RANK", 0, int)
    try:
        ranks = Ranks(rank, nnodes, os.environ.get("MASTER_ADDR", "127.0.0.1"), env_num("MASTER_PORT", 29500, int),
                      env_num("TRAIN_RDZV_TIMEOUT", 60.0), wake_r)
    except Interrupted:
        say("stopped during the rendezvous")
        return "stopped"
    say(f"rendezvous rank={rank} nnodes={nnodes} master={os.environ.get('MASTER_ADDR')}:"
        f"{os.environ.get('MASTER_PORT')}")
    return ranks


def reduce_step(ranks, step):
    """All-reduce the step counter; False if a peer is gone."""
    total = ranks.allreduce(step)
    if total is None:
        say(f"allreduce step {step}: a peer is gone", sys.stderr)
        return False
    if total != "":  # "": a stop signal came; the loop saves and exits
        say(f"allreduce step {step} sum {total} nnodes {ranks.nnodes}")
    return True


def this_rank_fails():
    fail_rank = os.environ.get("TRAIN_FAIL_RANK", "")
    return fail_rank == "" or fail_rank == os.environ.get("NODE_RANK", "0")


# --------------------------------------------------------------------------- main loop
def save_checkpoint(directory, step, loss, seconds):
    """Atomic save: temp file, fsync, rename, fsync the directory."""
    directory = os.path.abspath(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"ckpt-step{step}.json")
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump({"step": step, "loss": loss, "pid": os.getpid(), "time": time.time()}, f)
        f.flush()
        time.sleep(seconds)  # a real save of a few GiB takes a while
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def save_step_dir(root, step, seconds=0.0):
    """A checkpoint as trainers write them: a directory, its data first, its marker last."""
    path = os.path.abspath(os.path.join(root, f"step_{step}"))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "state.json"), "w") as f:
        json.dump({"step": step}, f)
    time.sleep(seconds)  # a real save of a few GiB takes a while: the marker comes last
    marker = os.environ.get("TRAIN_CKPT_MARKER", "COMPLETE")
    if marker:
        open(os.path.join(path, marker), "w").close()
    say(f"saved checkpoint {path}")


def resumed_step():
    """The step to go on from (TRAIN_RESUME), 0 without one."""
    path = os.environ.get("TRAIN_RESUME", "")
    if not path:
        return 0
    try:
        with open(os.path.join(path, "state.json")) as f:
            step = int(json.load(f)["step"])
    except (OSError, ValueError, KeyError):
        say(f"resume: no checkpoint state at {path!r}; from step 0")
        return 0
    say(f"resumed from {path} step {step}")
    return step


def train():
    if os.environ.get("TRAIN_FAIL_FAST") == "1" and this_rank_fails():
        say("error: TRAIN_FAIL_FAST=1: refusing to start (bad configuration)", sys.stderr)
        return 3
    step_s = env_num("TRAIN_STEP_SECONDS", 0.2)
    steps = env_num("TRAIN_STEPS", 0, int)
    toks = env_num("TRAIN_TOKS", 14500.0)
    profile_every = env_num("TRAIN_PROFILE_INTERVAL", 0, int)
    crash_at, nan_at = env_num("TRAIN_CRASH_AT", 0, int), env_num("TRAIN_NAN_AT", 0, int)
    oom_at, stall_at = env_num("TRAIN_OOM_AT", 0, int), env_num("TRAIN_STALL_AT", 0, int)
    exit_at, exit_code = env_num("TRAIN_EXIT_AT", 0, int), env_num("TRAIN_EXIT_CODE", 1, int)
    if not this_rank_fails():
        crash_at = exit_at = 0
    slow_after = env_num("TRAIN_SLOW_AFTER", 0, int)
    slow_factor = env_num("TRAIN_SLOW_FACTOR", 0.5)
    ckpt_dir = os.environ.get("TRAIN_CHECKPOINT_DIR", "checkpoints")
    ckpt_s = env_num("TRAIN_CHECKPOINT_SECONDS", 0.3)
    rng = random.Random(env_num("TRAIN_SEED", 0, int))

    # Signals only set a flag; set_wakeup_fd makes the step wait (a select) return at once.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stop.append(signum))
    save_now = []
    if os.environ.get("TRAIN_CKPT_SIGNAL"):
        signal.signal(getattr(signal, "SIG" + os.environ["TRAIN_CKPT_SIGNAL"].upper().replace("SIG", "")),
                      lambda signum, _frame: save_now.append(signum))

    workers, escapee_pid, alive_w = spawn_workers(
        env_num("TRAIN_WORKERS", 2, int), os.environ.get("TRAIN_ESCAPEE", "1") == "1")
    try:
        hold_gpu(env_num("TRAIN_GPU_MIB", 0, int))
        switches = ",".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                            if k.startswith("TRAIN_"))
        say(f"init pid={os.getpid()} workers={len(workers)}"
            f" worker_pids={','.join(str(p.pid) for p in workers) or '-'}"
            f" escapee_pid={escapee_pid or '-'} argv={json.dumps(sys.argv)}"
            f" switches={switches or '-'}")
        time.sleep(min(step_s, 0.1))  # "loading the model"
        ranks = join_ranks(wake_r)
        if ranks == "stopped":
            return 0
        if os.environ.get("TRAIN_READY_LINE", "1") == "1":
            say("ready")
        step, loss, next_at = resumed_step(), float("nan"), time.monotonic() + step_s
        ckpt_every = env_num("TRAIN_CKPT_EVERY", 0, int)
        crash_after = env_num("TRAIN_CRASH_AFTER", 0, int)
        if crash_after:
            crash_at = step + crash_after
        while True:
            timeout = max(0.0, next_at - time.monotonic())
            if select.select([wake_r], [], [], timeout)[0]:
                os.read(wake_r, 64)  # drain; the handler already recorded the signal
            if save_now:
                del save_now[:]
                save_step_dir(os.environ.get("TRAIN_CKPT_ROOT", "ckpt"), step, ckpt_s)
            if stop:
                name = signal.Signals(stop[0]).name
                path = save_checkpoint(ckpt_dir, step, loss, ckpt_s)
                say(f"checkpoint saved step={step} path={path} signal={name}")
                return 0
            if time.monotonic() < next_at:
                continue
            next_at += step_s
            if stall_at and step + 1 >= stall_at:
                continue  # hung: no output, no progress, still alive and still signal-aware
            step += 1
            forward(step, crash_at, oom_at)
            if step == exit_at:
                say(f"exit: step {step}, exiting with code {exit_code} (TRAIN_EXIT_AT)",
                    sys.stderr)
                return exit_code
            loss = 1.8 + 8.5 * math.exp(-step / 300.0) + rng.gauss(0.0, 0.04)
            if nan_at and step >= nan_at:
                loss = float("nan")
            rate = toks * (slow_factor if slow_after and step > slow_after else 1.0)
            rate *= 1.0 + rng.gauss(0.0, 0.02)
            lr = 3e-4 * min(1.0, step / 20.0)  # short linear warmup
            say(f"step {step} loss {loss:.4f} tok/s {rate:.1f} lr {lr:.1e}")
            if ckpt_every and step % ckpt_every == 0:
                save_step_dir(os.environ.get("TRAIN_CKPT_ROOT", "ckpt"), step)
            if ranks is not None and not reduce_step(ranks, step):
                if os.environ.get("TRAIN_PEER_LOSS") == "exit":
                    return 1
                ranks, stall_at = None, step + 1  # wait, as NCCL would, until stopped
            if profile_every and step % profile_every == 0:
                fwd = 1000.0 * step_s * 0.3 * (1.0 + rng.gauss(0.0, 0.05))
                say(f"profile: step {step} fwd_ms {fwd:.1f} bwd_ms {2.0 * fwd:.1f}")
            if steps and step >= steps:
                say(f"done step={step}")
                return 0
    finally:
        stop_workers(workers, alive_w)


def main(argv):
    if argv[1:2] == ["--worker"]:
        return worker_main("worker", int(argv[2]), int(argv[3]))
    if argv[1:2] == ["--escapee"]:
        return escapee_main(int(argv[2]), int(argv[3]))
    return train()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
