# What the MTP head (mtp_head.py) and the vision model (vision_head.py) share: both are converted once from tensors
# of an original Hub checkpoint, and a record next to the converted file (<file>.source.json) says which repo,
# commit and output type it came from, so a later install reuses it instead of fetching again.
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from installer.hub_api import hub_endpoint, hub_session, resolve_commit


@dataclass(frozen=True)
class CheckpointSource:
    repo: str
    revision: str | None      # None: not pinned, "main" is resolved at install time


def source_record(out: Path) -> Path:
    return out.with_name(out.name + ".source.json")


def already_made(out: Path, source: CheckpointSource, outtype: str | None = None) -> bool:
    """True when out was converted earlier from this repo (the pinned revision, if one is pinned; the same output
    type when outtype is given)."""
    try:
        made = json.loads(source_record(out).read_text())
    except (OSError, ValueError):
        return False
    return out.is_file() and made.get("repo") == source.repo and (outtype is None or made.get("outtype") == outtype) \
        and (source.revision is None or made.get("commit") == source.revision or made.get("revision") == source.revision)


def start_fetch(source: CheckpointSource, out: Path, what: str, say) -> tuple:
    """(session, commit, work dir) for converting out: the revision resolved to a commit, the pieces of another
    commit (an unpinned repo that moved on) removed, the work dir for this commit's pieces made."""
    session = hub_session()
    say(f"\nLooking up the original checkpoint {source.repo} on {hub_endpoint()} for the {what} ...")
    commit = resolve_commit(session, source.repo, source.revision or "main")
    if not source.revision:
        say(f"Note: the catalogue pins no revision for {source.repo}; using its current commit {commit[:12]}.")
    work_dir = out.parent / f"{out.stem}.parts-{commit[:12]}"
    for stale in out.parent.glob(f"{out.stem}.parts-*"):
        if stale != work_dir:
            say(f"Removing {stale.name}: pieces fetched from another commit of {source.repo}.")
            shutil.rmtree(stale, ignore_errors=True)
    work_dir.mkdir(parents=True, exist_ok=True)
    return session, commit, work_dir


def finish_fetch(source: CheckpointSource, out: Path, commit: str, outtype: str, work_dir: Path, what: str,
                 say) -> Path:
    """Records where out came from, drops the fetched pieces, says so; returns out."""
    source_record(out).write_text(json.dumps({"repo": source.repo, "revision": source.revision, "commit": commit,
                                              "outtype": outtype}) + "\n")
    shutil.rmtree(work_dir, ignore_errors=True)
    say(f"{what} ready: {out} ({out.stat().st_size / 1e9:.2f} GB).")
    return out
