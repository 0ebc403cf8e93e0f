"""Random training logs for the skim's tests (hypothesis): training lines, every event text and
NaN/Inf spelling in odd cases, near misses, tracebacks, CRLF, invalid UTF-8, very long lines."""

from __future__ import annotations

from hypothesis import strategies as st

FACTS = ("nan", "inf", "cuda_oom", "traceback", "nccl", "oom_killed")
EVENTS = ["Traceback (most recent call last):", "CUDA out of memory", "CUDA error: out of memory",
          "HIP out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA_ERROR_OUT_OF_MEMORY",
          "cudaErrorMemoryAllocation", "RESOURCE_EXHAUSTED: Out of memory", "NCCL WARN", "NCCL error",
          "ncclInternalError", "ncclSystemError", "ncclUnhandledCudaError", "ncclRemoteError",
          "ncclInvalidUsage", "ncclInvalidArgument", "DistBackendError",
          "Watchdog caught collective operation timeout", "watchdog got stuck",
          "NCCL communicator was aborted", "Some NCCL operations have failed or timed out",
          "Signal 9 (SIGKILL) received by PID 7", "exitcode  : -9", "(exitcode: -9)"]
WHOLE = ["Killed", "  Killed \r", "\u5df2\u6740\u6b7b", "x.sh: line 3:  1234 Killed  python",
         "Traceback (most recent call last):", '  File "train.py", line 3, in <module>',
         "RuntimeError: boom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]
NEAR = ["number of nan iterations:   0 |", "number of nan iterations:   2 |", "INFO 05-01 informative",
        "nanotron step 3", "info: config loaded", "Taiwan China nccl_test", "watchdog ok", "Killed by user",
        "exitcode  : 0", "Inference done", "NaNs: none", "[W reducer.cpp:1360] Warning: find_unused_parameters=True"]
VALUES = ["nan", "inf", "infinity", "-inf", "+nan", "-infinity"]
NAN_COUNTS = ["number of nan iterations:   %d |", "nan_iters: %d", "nan_count=%d", "num_nan: %d", "nan steps: %d",
              "n_nan %d", "nan_skipped=%d", "TRAIN_NAN_AT=%d"]


def cased(draw, text):
    """TEXT with some letters' case flipped (or none)."""
    if draw(st.booleans()):
        return text
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.swapcase() if f else c for c, f in zip(text, flips))


@st.composite
def line(draw):
    kind = draw(st.sampled_from(("train", "train", "train", "rank", "event", "whole", "near", "value",
                                 "count", "bad", "long")))
    step = draw(st.integers(0, 99999))
    if kind == "count":
        return "step %d | " % step + cased(draw, draw(st.sampled_from(NAN_COUNTS)) % draw(st.integers(0, 3)))
    if kind == "train":
        return "step %d | loss %.4f | tok/s %d | lr 3.0e-04" % (step, draw(st.floats(0, 9)), 14000 + step % 97)
    if kind == "rank":
        return "[rank%d]: step %d | loss 2.%04d | grad_norm 0.42 | mem 31.72GiB" % (step % 8, step, step % 9999)
    if kind == "event":
        text = draw(st.sampled_from(EVENTS))
        return "at %s here" % (cased(draw, text) if draw(st.integers(0, 3)) == 0 else text)
    if kind == "whole":
        return draw(st.sampled_from(WHOLE))
    if kind == "near":
        return cased(draw, draw(st.sampled_from(NEAR)))
    if kind == "value":
        tok = cased(draw, draw(st.sampled_from(VALUES)))
        shape = draw(st.sampled_from(("step %d loss %s", "step %d | loss: %s |", "{'step': %d, 'loss': %s}",
                                      "epoch %d val_loss=%s, seen")))
        return shape % (step, tok)
    if kind == "bad":
        return draw(st.binary(min_size=1, max_size=40)).replace(b"\n", b" ")
    if draw(st.booleans()):  # long, read whole by both
        return "x" * draw(st.integers(100, 60000)) + draw(st.sampled_from(("", " loss nan", " NCCL error")))
    # Longer than CARRY_MAX: one line, cut where the read holding its end leaves it unfinished
    # (the full read's own 1 MiB chunks decide); so only the count and its start are compared.
    return "NCCL error " * draw(st.integers(0, 1)) + "x" * draw(st.integers(66000, 150000))


@st.composite
def log(draw):
    lines = draw(st.lists(line(), min_size=1, max_size=120))
    lower = draw(st.booleans())  # most chunks with no upper-case N/A/I/F: the raw way
    out = []
    for ln in lines:
        b = ln if isinstance(ln, bytes) else ln.encode("utf-8")
        if lower and any(c in b for c in b"NAIF"):
            b = bytes(c for c in b if c not in b"NAIF")
        out.append(b + (b"\r\n" if draw(st.integers(0, 5)) == 0 else b"\n"))
    return b"".join(out)
