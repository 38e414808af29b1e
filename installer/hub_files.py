# Turns a catalogue choice into the exact remote files to fetch: resolves the revision to a commit, lists the
# repo tree, matches patterns, and cross-checks catalogue sizes/hashes against the Hub's metadata.
import fnmatch
from dataclasses import dataclass

import requests

from installer.catalog import FileSpec, ModelChoice
from installer.hub_api import HubError, HubNotFound, RemoteFile, list_repo_files, resolve_commit


@dataclass(frozen=True)
class ResolvedChoice:
    commit: str
    pinned: bool                       # False when the catalogue has no revision and "main" was used
    weight_files: list[RemoteFile]     # in shard order; the first one is what the engine is given
    mmproj: RemoteFile | None


def _match(spec: FileSpec, tree: dict[str, RemoteFile], repo: str, commit: str, what: str) -> list[RemoteFile]:
    if spec.path:
        if spec.path not in tree:
            raise HubNotFound(f"the file {spec.path} ({what}) is not in {repo} at commit {commit[:12]} "
                              f"(HTTP 404 from the file list).")
        matches = [tree[spec.path]]
    else:
        matches = [f for path, f in sorted(tree.items())
                   if fnmatch.fnmatch(path, spec.pattern) and (what == "image encoder" or
                                                               not f.name.startswith("mmproj"))]
        if not matches:
            raise HubNotFound(f"no file matching {spec.pattern} ({what}) is in {repo} at commit {commit[:12]}.")
    for remote in matches:
        _check_against_catalog(spec, remote)
    return matches


def _check_against_catalog(spec: FileSpec, remote: RemoteFile) -> None:
    if spec.size_bytes is not None and remote.size_bytes is not None and spec.size_bytes != remote.size_bytes:
        raise HubError(f"{remote.path}: the catalogue says {spec.size_bytes} bytes but the Hub says "
                       f"{remote.size_bytes}; the catalogue and the pinned revision disagree.")
    if spec.sha256 and remote.sha256 and spec.sha256.lower() != remote.sha256.lower():
        raise HubError(f"{remote.path}: the catalogue's sha256 {spec.sha256} differs from the Hub's "
                       f"{remote.sha256}; the catalogue and the pinned revision disagree.")


def _with_catalog_facts(spec: FileSpec, remote: RemoteFile) -> RemoteFile:
    """Fill size/hash the Hub did not give from the catalogue (a non-LFS file has no sha256 in the tree)."""
    return RemoteFile(repo=remote.repo, commit=remote.commit, path=remote.path,
                      size_bytes=remote.size_bytes if remote.size_bytes is not None else spec.size_bytes,
                      sha256=remote.sha256 or spec.sha256)


def resolve_choice(session: requests.Session, choice: ModelChoice) -> ResolvedChoice:
    revision = choice.revision or "main"
    commit = resolve_commit(session, choice.repo, revision)
    tree = list_repo_files(session, choice.repo, commit)
    weights: list[RemoteFile] = []
    for spec in choice.weight_files:
        weights += [_with_catalog_facts(spec, f) for f in _match(spec, tree, choice.repo, commit, "model weights")]
    if len(weights) != choice.shard_count:
        names = ", ".join(f.path for f in weights)
        raise HubError(f"expected {choice.shard_count} model shard(s) for {choice.name} in {choice.repo}, "
                       f"found {len(weights)}: {names}.")
    mmproj = None
    if choice.mmproj:
        found = _match(choice.mmproj, tree, choice.repo, commit, "image encoder")
        if len(found) != 1:
            raise HubError(f"expected one image-encoder file in {choice.repo}, found {len(found)}: "
                           f"{', '.join(f.path for f in found)}.")
        mmproj = _with_catalog_facts(choice.mmproj, found[0])
    return ResolvedChoice(commit=commit, pinned=bool(choice.revision), weight_files=weights, mmproj=mmproj)
