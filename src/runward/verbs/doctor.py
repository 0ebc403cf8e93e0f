"""runward doctor [--on TARGET]: what works on a target, hop by hop. The work and its
rendering: operations/doctor.py."""

from __future__ import annotations

from ._common import show


def add_arguments(p) -> None:
    pass  # the common flags only


def run(args, out) -> int:
    from ..operations.doctor import DoctorOptions, doctor
    return show(out, doctor(DoctorOptions.from_args(args)))
