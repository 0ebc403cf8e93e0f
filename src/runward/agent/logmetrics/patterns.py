"""The shapes of log lines the parser reads: numbers, names, prefixes, timestamps, events.

Compiled at import: the agent imports this package only for the verbs that read a log
(health, watch, status with metrics), so no other call pays for it.
"""

import re

DIGITS = b"0123456789"

# A number: 14512, 14,512, 2.31, .5, 1.5E-04, -3, nan, NaN, inf, -inf, Infinity. Not one
# glued to a word (acc1, fp16, E0321, v1.2): those stay part of the surrounding text. Nor a
# "nan" that more words and a colon follow: Megatron's "number of nan iterations:   0".
NUM_PAT = (
    r"(?<![\w.])("
    r"[-+]?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?(?:[eE][-+]?\d+)?"
    r"|[-+]?\.\d+(?:[eE][-+]?\d+)?"
    r"|[-+]?(?:[nN][aA][nN]|[iI][nN][fF](?:inity)?)(?!\w)(?![ \t]+[A-Za-z][A-Za-z_ ]*[:=])"
    r")"
)
NUM_RE = re.compile("(?a)" + NUM_PAT)
NUM_RE_B = re.compile(NUM_PAT.encode())
NAN_INF_RE_B = re.compile(rb"(?i)nan|inf")
# A NaN or Inf value leaves its letters in a line's skeleton: without this, none can be there.
# (A value token has no word character after it, so "INFO" is no such word.)
NAN_WORD_RE_B = re.compile(rb"(?i)(?<![a-z_])(?:nan|inf(?:inity)?)(?![a-z_])")
# The name before a number: the longest run of name characters that ends the gap, then an
# optional `=` or `:` and an opening quote or bracket. `,` `|` `;` `:` `=` end a name.
NAME_TAIL_RE = re.compile(
    r"(?<![A-Za-z0-9_])([A-Za-z_](?:[A-Za-z0-9_ /.%()#\-]*?[A-Za-z0-9_)%#])?)"
    r"['\"]?\s*(?:[=:]\s*)?['\"]?\[*\s*$"
)
UNIT_GLUED_RE = re.compile(r"^[A-Za-z%/]+")
# What may follow a number: a multiplier (14.5K, nanotron's 1.2B), decimal bytes (0.63GB,
# scaled to bytes) or binary bytes (31.72GiB, kept as printed, with the unit).
SUFFIX_RE = re.compile(r"^([kKMGT]i?B|[kKMGTB])(?![A-Za-z0-9])")
SUFFIX = {"k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "B": 1e9}
RATE_UNIT_RE = re.compile(r"^ ?([A-Za-z]*/[A-Za-z]+)(?![A-Za-z])")
# A duration's unit after its number: "893.13ms", "iter time: 412.30 ms", "Time: 0.392s".
TIME_UNIT_RE = re.compile(r"^ ?(ms|us|s)(?![A-Za-z/])")
# A unit a name ends with: Megatron's "memory(GiB)", "elapsed time per iteration (ms)".
NAME_UNIT_RE = re.compile(r"_(gib|mib|kib|tib|gb|mb|ms|us|pct)$")
NAME_UNIT = {"gib": "GiB", "mib": "MiB", "kib": "KiB", "tib": "TiB", "gb": "GB", "mb": "MB",
             "ms": "ms", "us": "us", "pct": "%"}
# A unit glued to a number and an opening parenthesis: a share of it follows (torchtitan's
# "31.72GiB(40.04%)"); "[  50/1251 (  4%)]" is no such thing.
SHARE_GAP_RE = re.compile(r"^[A-Za-z]+\($")
# ANSI colour escapes (torchtitan, nanotron, Keras colour their lines): their digits are no
# numbers; CSI_OPEN_RE: the text before a number ends inside one.
ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
CSI_OPEN_RE = re.compile(r"\x1b\[[0-9;]*$")
SOURCE_RE = re.compile(r"\.(?:py|c|cc|cpp|cu|h|hpp|rs|go)$")
NORM_RE = re.compile(r"[^a-z0-9]+")
DIGIT_RUN_B = re.compile(rb"\d+")
# What comes before the message on a log line and is not data: timestamps, [bracketed]
# headers ([INFO], [rank0]:, [logging.py:69:log_dist]), (APIServer pid=1), glog headers
# (E0321 02:07:08.408271257 123 ProcessGroupNCCL.cpp:607]), vLLM's `INFO 03-18 09:04:46`.
PREFIX_RE = re.compile(
    r"^(?:\s*(?:"
    r"\x1b\[[0-9;]*[A-Za-z]"
    r"|\[[^\]\n]{0,120}\]:?"
    r"|\([A-Za-z][^)\n]{0,80}\)"
    r"|\d{4}[-/]\d\d[-/]\d\d(?:[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?)?"
    r"|\d\d[-/]\d\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|[\w.<>]+ - (?=(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL)\b)"
    r"|[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+(?: +\d+)? [\w./-]+:\d+\]"
    r"|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b:?"
    r"|[\w./-]+\.(?:py|cc|cpp|h|hpp):\d+(?::\w+)?\]"
    r"|>>|\||-|:"
    r")\s*)+"
)
# Where a log header starts inside a line (after a progress bar that had no newline).
HEADER_START_RE_B = re.compile(rb"\[(?:rank\d+\]|[EWIF]\d{4} |[EWIF] )")
# A timestamp that starts the line: ISO 8601, `[2024-05-01 12:00:00,123]`, vLLM `INFO 03-18 ...`;
# also after one logger header (`[INFO|trainer.py:398] 2021-01-15 10:28:50,371 >> ...`).
TS_RE = re.compile(
    r"(?:\[[A-Za-z][^\]\n]{0,60}\] ?|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL):? )?"
    r"\[?(\d{4})[-/](\d\d)[-/](\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?"
    r"(Z|[+-]\d\d:?\d\d)?\]?"
)
TS_MD_RE = re.compile(r"(?:INFO|WARNING|ERROR|DEBUG) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")

# Lines that are events, found over a whole chunk at once (they are rare; the scan is C).
# Texts checked against real logs: PyTorch's caching allocator ("torch.OutOfMemoryError:
# CUDA out of memory. Tried to allocate ..."; before 2.5 "torch.cuda.OutOfMemoryError", before
# 1.13 "RuntimeError: CUDA out of memory"), the CUDA runtime ("CUDA error: out of memory",
# cudaErrorMemoryAllocation), the driver API (CUDA_ERROR_OUT_OF_MEMORY), cuBLAS handle creation
# ("CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"), ROCm ("HIP out of
# memory"), XLA ("RESOURCE_EXHAUSTED: Out of memory"); ProcessGroupNCCL ("Watchdog caught
# collective operation timeout: WorkNCCL(...)", "watchdog got stuck", "NCCL error in: ...",
# DistBackendError, ncclInternalError/ncclSystemError/...), NCCL_DEBUG=WARN output ("NCCL WARN
# NET/IB : Got completion ..."); the shell's "Killed" after the kernel OOM killer sent SIGKILL
# (or its zh_CN "已杀死"), and torchrun's "exitcode  : -9" / "Signal 9 (SIGKILL) received by PID".
# Triton's "OutOfResources: out of resource: shared memory" during autotuning is not one: the
# autotuner skips that config and goes on.
# The batch system's and launcher's own lines, in the job's log: no metric of the job's
# ("*** STEP 42.0 ON node1 CANCELLED AT ..." would give step=42; "srun: ... Waiting up to 32
# seconds" a metric "waiting_up_to").
TOOL_LINE_RE = re.compile(r"\s*(?:slurmstepd(?:-[\w.-]+)?|srun|sbatch|salloc|slurmd|scontrol): "
                          r"|\s*\*\*\* (?:JOB|STEP) \d")
EVENT_RE = re.compile(
    "(?m)(?P<traceback>Traceback \\(most recent call last\\):)"
    "|(?P<cuda_oom>CUDA out of memory|CUDA error: out of memory|HIP out of memory"
    "|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation"
    "|RESOURCE_EXHAUSTED: Out of memory)"
    "|(?P<nccl>NCCL WARN|NCCL error|ncclInternalError|ncclSystemError|ncclUnhandledCudaError"
    "|ncclRemoteError|ncclInvalidUsage|ncclInvalidArgument|DistBackendError"
    "|Watchdog caught collective operation timeout|watchdog got stuck"
    "|NCCL communicator was aborted|Some NCCL operations have failed or timed out)"
    "|(?P<oom_killed>^[ \\t]*(?:Killed|\u5df2\u6740\u6b7b)[ \\t\\r]*$|: line \\d+: +\\d+ Killed "
    "|Signal 9 \\(SIGKILL\\) received by PID|exitcode *: -9\\b|\\(exitcode: -9\\))"
    .encode("utf-8"),
)
EVENT_HINTS = tuple(s.encode("utf-8") for s in (
    "Traceback", "memory", "MEMORY", "ALLOC_FAILED", "NCCL", "nccl", "Killed", "SIGKILL",
    "exitcode", "\u5df2\u6740\u6b7b"))  # every event pattern holds one: checked in C first
