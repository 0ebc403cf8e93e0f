"""Helpers for tests that need GPUs on a machine without one (issue 5).

The fake driver is tests/bin/nvidia-smi plus a JSON state file; this module writes that
file and attaches real processes to fake GPUs. The state code itself lives in the stand-in
(loaded here as a module), so the locked, atomic read-modify-write exists once.

    state = fakegpu.create_state(tmp_path / "smi.json", gpus=8)
    env = fakegpu.env_with_standin(state)          # PATH first entry: tests/bin
    fakegpu.attach(state, gpu=3, pid=proc.pid, mib=70000, release_delay=1.5)
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
from pathlib import Path

BIN_DIR = Path(__file__).resolve().parent / "bin"
STANDIN = BIN_DIR / "nvidia-smi"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "nvidia-smi"

H100 = "NVIDIA H100 80GB HBM3"
H100_MIB = 81559  # memory.total of an H100 80GB HBM3, as nvidia-smi reports it


def _load_standin():
    loader = importlib.machinery.SourceFileLoader("runward_fake_nvidia_smi", str(STANDIN))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


standin = _load_standin()


def gpu_uuid(index):
    """A stable, well-formed uuid per index (the GPU-8-4-4-4-12 hex shape)."""
    return f"GPU-{index:08x}-7a1e-4c0d-9b5e-{0xfa1e0000 + index:012x}"


def create_state(path, gpus=8, scenario="ok", name=H100, total=H100_MIB, util=0, **extra):
    """Write a fresh state file; GPUS is a count or a list of gpu dicts. Returns the path."""
    if isinstance(gpus, int):
        gpus = [{"index": i, "uuid": gpu_uuid(i), "name": name, "total": total,
                 "base_used": 0, "util": util} for i in range(gpus)]
    state = {"scenario": scenario, "gpus": gpus, "procs": [], **extra}
    standin.write_state(str(path), state)
    return Path(path)


def attach(state_path, gpu, pid, mib, release_delay=0.0):
    """PID holds MIB MiB on GPU (index) until it dies, then for RELEASE_DELAY seconds."""
    return standin.attach(str(state_path), gpu, pid, mib, release_delay)


def update(state_path, change):
    """Locked, atomic read-modify-write of the state; CHANGE mutates the dict in place."""
    return standin.update_state(str(state_path), change)


def read_state(state_path):
    return standin.read_state(str(state_path))


def env_with_standin(state_path, base=None):
    """An environment where `nvidia-smi` is the stand-in and it reads STATE_PATH."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    env["RUNWARD_FAKE_SMI_STATE"] = str(state_path)
    return env


def run_smi(state_path, *args, timeout=10):
    """Run the stand-in as a real process: CompletedProcess with text stdout and stderr."""
    return subprocess.run([str(STANDIN), *args], env=env_with_standin(state_path),
                          capture_output=True, text=True, timeout=timeout)


def query_gpus(state_path):
    """The agent's --query-gpu form, parsed: [{index, uuid, name, used, total, util}]."""
    out = run_smi(state_path, "--query-gpu=index,uuid,name,memory.used,memory.total,"
                  "utilization.gpu", "--format=csv,noheader,nounits")
    out.check_returncode()
    keys = ("index", "uuid", "name", "used", "total", "util")
    return [dict(zip(keys, line.split(", "))) for line in out.stdout.splitlines()]


def query_apps(state_path):
    """The agent's --query-compute-apps form, parsed: [{gpu_uuid, pid, used}]."""
    out = run_smi(state_path, "--query-compute-apps=gpu_uuid,pid,used_memory",
                  "--format=csv,noheader,nounits")
    out.check_returncode()
    return [dict(zip(("gpu_uuid", "pid", "used"), line.split(", ")))
            for line in out.stdout.splitlines()]


def dump(state_path):
    """The state as indented JSON, for assertion messages."""
    return json.dumps(read_state(state_path), indent=1)
