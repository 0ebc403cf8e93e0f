"""push: local files through the hop chain onto a target, only what differs, sha256-checked
where they land (deploy shares its flags: operations/deploy.py)."""

from __future__ import annotations

from . import Outcome, Targeted, single
from .common import load_config, target_of


class SyncOptions(Targeted):
    """The flags push and deploy share (verbs/_syncflags.py)."""
    delete: bool = False
    exclude: list = []
    no_ignore_files: bool = False
    dry_run: bool = False


class PushOptions(SyncOptions):
    """What `runward push` takes (verbs/push.py's flags)."""
    specs: list = []


def sync_kwargs(opts: SyncOptions) -> dict:
    return {"delete": opts.delete, "excludes": opts.exclude, "dry_run": opts.dry_run,
            "gitignore": not opts.no_ignore_files}


def push(opts: PushOptions, progress: bool = False) -> Outcome:
    """PROGRESS: a line per file on stderr as it goes (the CLI's human mode; never in a document)."""
    from .. import files as _files
    from ..views.render import describe_sync
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    res = _files.push(target, opts.specs, progress=progress, **sync_kwargs(opts))
    return single("push", target, res, lambda: describe_sync(res, target, "pushed"))
