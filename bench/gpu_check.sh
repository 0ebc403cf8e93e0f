#!/usr/bin/env bash
# GPU check on a real NVIDIA machine (issue 5): start a small torch job under runward that
# holds ~2 GiB on GPU 0, show `runward gpus` mapping it to its run, `runward stacks` on it
# (py-spy: pip install py-spy), stop it and verify the
# release, then the GPU gate (a supervised job SIGKILLed: its next attempt starts only once
# the memory is released), and print each figure. Bounded: every step has its own timeout; the whole check
# takes well under 5 minutes (typically 20-40 s, most of it torch's CUDA start-up).
#
#   bash bench/gpu_check.sh            # from the checkout; PYTHON=... picks the python with torch
#
# Exit 0 only when every step was verified; otherwise non-zero with the step that failed.
# Needs: nvidia-smi, a python3 with torch and CUDA. No network: runward is installed from the
# checkout (pip install -e . --no-deps --no-build-isolation) into a venv if it is not there.
#
# GPU_CHECK_STANDIN=1 runs the same steps on a machine without a GPU, against the nvidia-smi
# stand-in of the tests (tests/bin/nvidia-smi); it checks this script, not a driver.
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3}"
MIB="${GPU_CHECK_MIB:-2048}"
NAME="gpucheck"
T_START=$(date +%s.%N)
FAILS=()

say() { printf '%s\n' "$*"; }
fig() { printf '  %-34s %s\n' "$1" "$2"; }
fail() { FAILS+=("$1"); say "NOT VERIFIED: $1"; }
now() { date +%s.%N; }
since() { "$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }
# jq-free JSON access: jget FILE 'python expression on d'
jget() { "$PY" -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2" 2>/dev/null; }

# --- preflight --------------------------------------------------------------------------
if [ "${GPU_CHECK_STANDIN:-0}" = 1 ]; then
    STANDIN_STATE="$(mktemp "${TMPDIR:-/tmp}/runward-gpu-check-smi.XXXXXX")"
    PYTHONPATH="$ROOT/tests" "$PY" -c "import fakegpu,sys; fakegpu.create_state(sys.argv[1], gpus=2)" "$STANDIN_STATE"
    export PATH="$ROOT/tests/bin:$PATH" RUNWARD_FAKE_SMI_STATE="$STANDIN_STATE"
    export TRAIN_GPU_RELEASE_SECONDS=1.0
    say "STAND-IN MODE: no real GPU is used (tests/bin/nvidia-smi, state $STANDIN_STATE)"
fi
command -v nvidia-smi >/dev/null || { say "no nvidia-smi on PATH: this check needs an NVIDIA GPU"; exit 2; }
if [ "${GPU_CHECK_STANDIN:-0}" != 1 ] && \
   ! timeout 120 "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    say "$PY has no torch with CUDA (set PYTHON=/path/to/python3 with torch)"; exit 2
fi
say "nvidia-smi: $(nvidia-smi --query-gpu=index,name,memory.used,memory.total --format=csv,noheader | head -1)"
nvidia-smi --version 2>/dev/null | sed -n '1,3p' || true

# --- runward: from the checkout; a venv only when it is not importable already -----------
RUNWARD=()
if [ -x "$ROOT/.venv/bin/runward" ]; then
    RUNWARD=("$ROOT/.venv/bin/runward")
elif "$PY" -c "import runward, sys; sys.exit(not runward.__file__.startswith(sys.argv[1]))" "$ROOT/" 2>/dev/null; then
    RUNWARD=("$PY" -m runward)
elif "$PY" -c "import runward" 2>/dev/null; then
    # another checkout's runward (an editable install elsewhere): this checkout's source
    # first, or the check would time that one
    RUNWARD=(env PYTHONPATH="$ROOT/src" "$PY" -m runward)
else
    VENV="${RUNWARD_GPU_VENV:-${TMPDIR:-/tmp}/runward-gpu-venv}"
    if [ ! -x "$VENV/bin/runward" ]; then
        say "installing runward from $ROOT into $VENV (no network: --no-deps --no-build-isolation)"
        "$PY" -m venv --system-site-packages "$VENV" \
            && (cd "$ROOT" && "$VENV/bin/pip" install -q -e . --no-deps --no-build-isolation) \
            || { say "venv install failed; running from the source tree instead"; VENV=""; }
    fi
    if [ -n "$VENV" ] && [ -x "$VENV/bin/runward" ]; then
        RUNWARD=("$VENV/bin/runward")
    else
        RUNWARD=(env PYTHONPATH="$ROOT/src" "$PY" -m runward)
    fi
fi
rw() { timeout "${RW_TIMEOUT:-150}" "${RUNWARD[@]}" "$@"; }

WORK="$(mktemp -d "${TMPDIR:-/tmp}/runward-gpu-check.XXXXXX")"
export RUNWARD_HOME="$WORK/home"
cleanup() {
    rw stop "$NAME" --grace 5 --gpu-release-timeout 20 >/dev/null 2>&1 || true
    rw stop gpugate --grace 5 --gpu-release-timeout 20 >/dev/null 2>&1 || true
    rm -rf "$WORK" "${STANDIN_STATE:-}" "${STANDIN_STATE:+$STANDIN_STATE.lock}"
}
trap cleanup EXIT

# --- start: wait until GPU 0 is free, then hold MIB MiB with torch, ready when it says so ----
say ""
say "== start (the job: examples/train.py, TRAIN_GPU_MIB=$MIB, torch on cuda:0)"
t0=$(now)
rw start "$NAME" --json --gpus 0 --wait-gpus-free --gpu-wait-timeout 30 --settle 1 \
    --ready "^gpu: pid=[0-9]+ holds $MIB MiB on (cuda:0|GPU 0)" --ready-timeout 120 \
    --env TRAIN_GPU_MIB="$MIB" --env TRAIN_STEP_SECONDS=0.2 --env TRAIN_WORKERS=1 --env TRAIN_ESCAPEE=0 \
    -- "$PY" "$ROOT/examples/train.py" > "$WORK/start.json"
rc=$?
START_S=$(since "$t0")
if [ $rc -ne 0 ]; then
    fail "start (exit $rc): $(jget "$WORK/start.json" 'd["error"]["message"]')"
    cat "$WORK/start.json"; exit 1
fi
PID=$(jget "$WORK/start.json" 'd["result"]["pid"]')
fig "start-to-alive+ready (wall)" "${START_S}s"
fig "waited for GPU 0 to be free" "$(jget "$WORK/start.json" 'd["result"]["gpu_wait"]["waited_s"]')s"
fig "job pid" "$PID"

# --- gpus: the process on GPU 0 is the run's ------------------------------------------------
say ""
say "== runward gpus"
MAPPED=""
for _ in $(seq 1 20); do   # the CUDA context can appear in nvidia-smi a moment after the print
    t0=$(now)
    rw gpus --json > "$WORK/gpus.json" || true
    GPUS_S=$(since "$t0")
    MAPPED=$(jget "$WORK/gpus.json" "[p for p in d['result']['gpus'][0]['processes'] if p.get('run') == '$NAME' and p.get('pid') == $PID]")
    [ -n "$MAPPED" ] && [ "$MAPPED" != "[]" ] && break
    sleep 0.5
done
rw gpus
fig "gpus call (wall)" "${GPUS_S}s"
fig "mapping" "$(jget "$WORK/gpus.json" 'd["result"]["mapping"]')"
if [ -n "$MAPPED" ] && [ "$MAPPED" != "[]" ]; then
    fig "job's memory on GPU 0" "$(jget "$WORK/gpus.json" "[p['used_mib'] for p in d['result']['gpus'][0]['processes'] if p.get('pid') == $PID][0]") MiB"
else
    fail "gpus did not map a process on GPU 0 to run $NAME (pid $PID)"
fi
rw status "$NAME" --json > "$WORK/status.json"
fig "status gpu_usage" "$(jget "$WORK/status.json" 'd["result"]["runs"][0].get("gpu_usage")')"

# --- stacks: the Python stack of the CUDA job, read by py-spy (issue 28) ---------------------
say ""
say "== runward stacks"
t0=$(now)
rw stacks "$NAME" --bring-py-spy --json > "$WORK/stacks.json"   # its own py-spy, else this machine's (runward[stacks])
rc=$?
STACKS_S=$(since "$t0")
fig "stacks call (wall)" "${STACKS_S}s"
fig "summary" "$(jget "$WORK/stacks.json" 'd["result"]["summary"]')"
FRAME=$(jget "$WORK/stacks.json" "[p['frame'] for p in d['result']['procs'] if p.get('pid') == $PID and p.get('frame')][0]")
if [ $rc -ne 0 ] || [ -z "$FRAME" ]; then
    # py-spy missing or ptrace refused: the answer's hint says what to do
    fail "stacks (exit $rc): no frame for the job (pid $PID): $(jget "$WORK/stacks.json" 'd["result"].get("hint") or d.get("error")')"
else
    fig "the job's frame" "$FRAME"
fi

# --- stop: verified dead, then verified GPU release -----------------------------------------
say ""
say "== stop (verified dead, then GPU 0 released)"
t0=$(now)
rw stop "$NAME" --json --grace 20 --gpu-release-timeout 60 > "$WORK/stop.json"
rc=$?
STOP_S=$(since "$t0")
fig "stop (wall)" "${STOP_S}s"
fig "tree dead after" "$(jget "$WORK/stop.json" 'd["result"]["stop_s"]')s"
fig "release wait" "$(jget "$WORK/stop.json" 'd["result"]["gpu_release"].get("waited_s")')s"
fig "release verified" "$(jget "$WORK/stop.json" 'd["result"]["gpu_release"].get("verified")') (method $(jget "$WORK/stop.json" 'd["result"]["gpu_release"].get("method")'))"
fig "GPU 0 used after release" "$(jget "$WORK/stop.json" 'd["result"]["gpu_release"]["gpus"][0]["used_mib"]') MiB"
if [ $rc -ne 0 ]; then
    fail "stop (exit $rc): $(jget "$WORK/stop.json" 'd["error"]["message"]')"
elif [ "$(jget "$WORK/stop.json" 'd["result"]["gpu_release"]["verified"]')" != "True" ]; then
    fail "stop answered 0 but gpu_release is not verified"
fi

# --- the GPU gate: a supervised CUDA job killed with SIGKILL; the next attempt only once its
# memory is released (issue 29: a restart that starts while the memory is held OOMs at once)
say ""
say "== GPU gate (supervised job SIGKILLed; the next attempt starts only once GPU 0 is released)"
GATE="gpugate"
rw start "$GATE" --json --gpus 0 --wait-gpus-free --gpu-wait-timeout 60 --settle 1 \
    --restart on-failure --backoff 0 --max-restarts 1 --gpu-release-timeout 60 \
    --ready "^gpu: pid=[0-9]+ holds $MIB MiB on (cuda:0|GPU 0)" --ready-timeout 120 \
    --env TRAIN_GPU_MIB="$MIB" --env TRAIN_STEP_SECONDS=0.2 --env TRAIN_WORKERS=1 --env TRAIN_ESCAPEE=0 \
    -- "$PY" "$ROOT/examples/train.py" > "$WORK/gate-start.json"
rc=$?
GPID=$(jget "$WORK/gate-start.json" 'd["result"]["pid"]')
if [ $rc -ne 0 ] || [ -z "$GPID" ]; then
    fail "gate: start (exit $rc): $(jget "$WORK/gate-start.json" 'd["error"]["message"]')"
else
    # its memory on GPU 0 first (the CUDA context can show a moment after the ready line)
    for _ in $(seq 1 40); do
        nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -qx "$GPID" && break
        sleep 0.25
    done
    A1="$RUNWARD_HOME/runs/$GATE/attempts/1.json"
    A2="$RUNWARD_HOME/runs/$GATE/attempts/2.json"
    T_KILL=$(now)
    kill -KILL "$GPID"
    # the release as nvidia-smi shows it: the killed pid gone from GPU 0's compute apps, and
    # GPU 0's memory.used, less what the processes it lists hold (attempt 2 takes its own the
    # moment it starts), at most 1024 MiB: the gate's own test
    released() {
        "$PY" - "$GPID" <<'PYEOF'
import subprocess, sys
q = lambda *a: subprocess.run(["nvidia-smi", *a, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, check=True).stdout.splitlines()
uuid, used = [c.strip() for c in q("--query-gpu=uuid,memory.used", "-i", "0")[0].split(",")]
apps = [[c.strip() for c in ln.split(",")] for ln in q("--query-compute-apps=gpu_uuid,pid,used_memory") if ln.strip()]
apps = [a for a in apps if a[0] == uuid]
gone = all(a[1] != sys.argv[1] for a in apps)
rest = float(used) - sum(float(a[2]) for a in apps if a[2].replace(".", "").isdigit())
sys.exit(0 if gone and rest <= 1024 else 1)
PYEOF
    }
    T_REL=""
    end=$((SECONDS + 120))
    while [ $SECONDS -lt $end ]; do   # as fast as nvidia-smi answers, 0.05 s between
        if released; then T_REL=$(now); break; fi
        sleep 0.05
    done
    # attempt 2: its record and its job alive (its pid's start time in its record, /proc)
    end=$((SECONDS + 120))
    while [ $SECONDS -lt $end ] && [ -z "$(jget "$A2" 'd.get("started_at") or ""')" ]; do sleep 0.1; done
    STARTED=$(jget "$A2" 'd.get("started_at") or ""')
    P2=$(jget "$A2" 'd["job"]["pid"]')
    if [ -z "$T_REL" ]; then
        fail "gate: GPU 0 was not seen released within 2 minutes of the SIGKILL"
    elif [ -z "$STARTED" ] || [ -z "$P2" ] || [ ! -d "/proc/$P2" ]; then
        fail "gate: attempt 2 did not start (alive) after the release: $(jget "$A1" 'd.get("blocked")')"
    else
        fig "kill -> GPU 0 released (nvidia-smi)" "$("$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$T_KILL" "$T_REL")s"
        fig "kill -> attempt 2 started" "$("$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$T_KILL" "$STARTED")s"
        fig "gate: waited / nvidia-smi reads" "$(jget "$A2" 'd["gpu_gate"].get("waited_s")')s / $(jget "$A2" 'd["gpu_gate"]["gpus"].get("polls")')"
        fig "attempt 2 pid (alive)" "$P2"
        # this script sees the release one nvidia-smi call (its own time, 0.05 s between) after
        # it happened at the latest: a start earlier than that, less that margin, came first
        early=$("$PY" -c "import sys; print(int(float(sys.argv[1]) < float(sys.argv[2]) - float(sys.argv[3])))" "$STARTED" "$T_REL" "${GATE_MARGIN_S:-1.0}")
        [ "$early" = 0 ] || fail "gate: attempt 2 started before GPU 0 was released"
        [ "$(jget "$A2" 'd["gpu_gate"]["gpus"].get("checked")')" = "True" ] || fail "gate: the release was not checked"
    fi
fi
rw stop "$GATE" --json --grace 20 --gpu-release-timeout 60 > "$WORK/gate-stop.json" \
    || fail "gate: stop of attempt 2 (exit $?): $(jget "$WORK/gate-stop.json" 'd["error"]["message"]')"

say ""
fig "total" "$(since "$T_START")s"
if [ ${#FAILS[@]} -ne 0 ]; then
    say "GPU CHECK FAILED: ${FAILS[*]}"
    exit 1
fi
say "GPU CHECK OK: start verified alive, gpus mapped the job to its run, stacks read its frame, stop verified dead and GPU 0 released;"
say "  a SIGKILLed supervised job's next attempt started only once GPU 0 was released"
