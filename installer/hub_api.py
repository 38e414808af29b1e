# Talking to the Hugging Face Hub (or anything laid out like it, via HF_ENDPOINT): which commit a revision is,
# the repo's file list with LFS sizes and sha256, and the resolve URL of a file. Downloading itself is download.py.
import os
from dataclasses import dataclass
from urllib.parse import quote, urljoin

import requests

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT_S = 30


class HubError(Exception):
    """A Hub answer the installer cannot go on with; the message is meant for the user."""


class HubNotFound(HubError):
    pass


@dataclass(frozen=True)
class RemoteFile:
    repo: str
    commit: str
    path: str
    size_bytes: int | None
    sha256: str | None     # from the tree's lfs.oid; None for small non-LFS files

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]


def hub_endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def hub_session() -> requests.Session:
    session = requests.Session()
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        session.headers["Authorization"] = f"Bearer {token}"
    session.headers["User-Agent"] = "strata-installer"
    return session


def resolve_url(repo: str, commit: str, path: str) -> str:
    return f"{hub_endpoint()}/{repo}/resolve/{commit}/{quote(path)}"


def _get_json(session: requests.Session, url: str, what: str):
    try:
        response = session.get(url, timeout=TIMEOUT_S)
    except requests.RequestException as e:
        raise HubError(f"could not reach {hub_endpoint()} to read {what}: {e}. "
                       f"Check the internet connection (or HF_ENDPOINT) and run the installer again.") from e
    if response.status_code == 404:
        raise HubNotFound(f"{what} was not found on {hub_endpoint()} (HTTP 404, "
                          f"{response.headers.get('X-Error-Code', 'no error code')}).")
    if response.status_code in (401, 403):
        raise HubError(f"{hub_endpoint()} refused to give {what} (HTTP {response.status_code}). If the repo needs "
                       f"a login, set HF_TOKEN to a Hugging Face access token and run again.")
    if response.status_code != 200:
        raise HubError(f"{hub_endpoint()} answered HTTP {response.status_code} for {what}.")
    try:
        return response.json(), response
    except ValueError as e:
        raise HubError(f"{hub_endpoint()} sent something that is not JSON for {what}.") from e


def resolve_commit(session: requests.Session, repo: str, revision: str) -> str:
    """The 40-hex commit a revision (branch, tag or commit) stands for."""
    info, _ = _get_json(session, f"{hub_endpoint()}/api/models/{repo}/revision/{quote(revision, safe='')}",
                        f"revision '{revision}' of the repo {repo}")
    commit = info.get("sha")
    if not isinstance(commit, str) or len(commit) != 40:
        raise HubError(f"the Hub's answer for {repo}@{revision} has no commit sha (got {commit!r}).")
    return commit


def list_repo_files(session: requests.Session, repo: str, commit: str) -> dict[str, RemoteFile]:
    """Every file of the repo at a commit, with size and (for LFS files) sha256; follows Link pagination."""
    url = f"{hub_endpoint()}/api/models/{repo}/tree/{commit}?recursive=true&expand=false"
    files: dict[str, RemoteFile] = {}
    while url:
        entries, response = _get_json(session, url, f"the file list of {repo}@{commit[:12]}")
        for entry in entries:
            if entry.get("type") != "file":
                continue
            lfs = entry.get("lfs") or {}
            files[entry["path"]] = RemoteFile(repo=repo, commit=commit, path=entry["path"],
                                              size_bytes=lfs.get("size", entry.get("size")),
                                              sha256=lfs.get("oid") or lfs.get("sha256"))
        next_url = response.links.get("next", {}).get("url")
        url = urljoin(response.url, next_url) if next_url else None
    return files
