# Resumable downloads on the Hub's resolve URLs: bytes go to NAME.part (kept across kills and restarts) and
# continue with an HTTP Range request; size and sha256 are checked; a corrupted file is fetched again.
import errno
import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import requests
from tqdm import tqdm

from installer.hub_api import RemoteFile, resolve_url

CHUNK_BYTES = 1 << 20
HASH_BLOCK_BYTES = 8 << 20
CONNECT_RETRIES = 5
GB = 1e9


class DownloadError(Exception):
    """A download that cannot go on; the message says what was kept and what to do."""


class DiskFullError(DownloadError):
    pass


class RemoteNotFoundError(DownloadError):
    pass


def part_path(final: Path) -> Path:
    return final.with_name(final.name + ".part")


def marker_path(final: Path) -> Path:
    return final.with_name(final.name + ".verified")


def gb(n_bytes: int) -> str:
    return f"{n_bytes / GB:.1f} GB" if n_bytes >= GB / 10 else f"{n_bytes / 1e6:.2f} MB"


def bytes_still_needed(final: Path, remote: RemoteFile) -> int:
    """Bytes this file still has to fetch, judged from what is on disk (no hashing)."""
    if final.exists() and final.stat().st_size == remote.size_bytes:
        return 0
    part = part_path(final)
    have = part.stat().st_size if part.exists() else 0
    return remote.size_bytes - have if have <= remote.size_bytes else remote.size_bytes


def check_disk_space(dest_dir: Path, remotes: list[RemoteFile]) -> None:
    """Refuse before fetching a byte when the files cannot fit; a small margin is kept for the system."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    needed = sum(bytes_still_needed(dest_dir / r.name, r) for r in remotes)
    if needed == 0:
        return
    margin = min(2 << 30, needed // 50)
    free = shutil.disk_usage(dest_dir).free
    if needed + margin > free:
        raise DiskFullError(
            f"Not enough free disk space in {dest_dir}: the model still needs {gb(needed + margin)} "
            f"(with a small margin) but only {gb(free)} is free. Nothing was fetched; what was already "
            f"downloaded is kept. Free some space (or pass --gguf-dir on a bigger disk) and run the installer again.")


def sha256_of(path: Path, limit_bytes: int | None = None) -> "hashlib._Hash":
    hasher = hashlib.sha256()
    remaining = limit_bytes if limit_bytes is not None else path.stat().st_size
    with open(path, "rb") as f:
        while remaining > 0:
            block = f.read(min(HASH_BLOCK_BYTES, remaining))
            if not block:
                break
            hasher.update(block)
            remaining -= len(block)
    return hasher


def _marker_matches(final: Path, remote: RemoteFile) -> bool:
    try:
        marker = json.loads(marker_path(final).read_text())
    except (OSError, ValueError):
        return False
    stat = final.stat()
    return (marker.get("size") == stat.st_size and marker.get("mtime_ns") == stat.st_mtime_ns
            and marker.get("sha256") == remote.sha256)


def _write_marker(final: Path, remote: RemoteFile) -> None:
    stat = final.stat()
    marker_path(final).write_text(json.dumps({"size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                                              "sha256": remote.sha256}))


def verify_file(final: Path, remote: RemoteFile, say=print) -> bool:
    """True when the file on disk has the right size and sha256 (hashed once, remembered in NAME.verified)."""
    if not final.exists() or final.stat().st_size != remote.size_bytes:
        return False
    if remote.sha256 is None or _marker_matches(final, remote):
        return True
    say(f"Checking {final.name} ({gb(remote.size_bytes)}) against its sha256 ...")
    if sha256_of(final).hexdigest() != remote.sha256.lower():
        return False
    _write_marker(final, remote)
    return True


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _fetch_into_part(session: requests.Session, remote: RemoteFile, part: Path, say) -> "hashlib._Hash":
    """Bring NAME.part up to the full size, continuing from the bytes already there. Returns its sha256."""
    size = remote.size_bytes
    url = resolve_url(remote.repo, remote.commit, remote.path)
    have = part.stat().st_size if part.exists() else 0
    if have > size:
        say(f"{part.name} is larger than the file should be ({have} > {size} bytes); starting it again.")
        part.unlink()
        have = 0
    if have:
        say(f"Resuming {remote.name} at {gb(have)} of {gb(size)}; checking the bytes already on disk ...")
    hasher = sha256_of(part, have) if have else hashlib.sha256()
    failures = 0
    with tqdm(total=size, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=remote.name,
              dynamic_ncols=True) as bar:
        while have < size:
            try:
                before = have
                have, hasher = _fetch_range(session, url, remote, part, have, hasher, bar, say)
                if have == before and have < size:
                    raise requests.ConnectionError(f"the server sent no bytes at offset {have}")
                failures = 0
            except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as e:
                failures += 1
                if failures > CONNECT_RETRIES:
                    raise DownloadError(f"the connection kept failing while fetching {remote.name} ({e}). "
                                        f"{gb(have)} of {gb(size)} is kept in {part}; run the installer again "
                                        f"to continue from there.") from e
                say(f"Connection problem ({type(e).__name__}); retrying from {gb(have)} in {failures} s ...")
                time.sleep(failures)
                have = part.stat().st_size
                hasher = sha256_of(part, have)
    return hasher


def _fetch_range(session, url, remote, part, have, hasher, bar, say):
    """One GET from byte `have`; returns the new (have, hasher). Raises DownloadError on answers to give up on."""
    headers = {"Range": f"bytes={have}-"} if have else {}
    with session.get(url, headers=headers, stream=True, timeout=60, allow_redirects=True) as response:
        status = response.status_code
        if status == 404:
            raise RemoteNotFoundError(
                f"{remote.name} was not found at {url} (HTTP 404, "
                f"{response.headers.get('X-Error-Code', 'no error code')}). What was downloaded so far is kept "
                f"in {part.parent}. Check the model catalogue or try again later.")
        if status in (401, 403):
            raise DownloadError(f"the Hub refused {remote.name} (HTTP {status}). If the repo needs a login, set "
                                f"HF_TOKEN to a Hugging Face access token and run again; downloaded bytes are kept.")
        if status == 416:
            say(f"The server could not continue {remote.name} at byte {have}; starting it again.")
            part.unlink(missing_ok=True)
            return 0, hashlib.sha256()
        if status >= 500:
            raise requests.ConnectionError(f"HTTP {status} from the server")
        if status == 200 and have:
            say(f"The server ignored the resume request for {remote.name}; starting it again from zero.")
            part.unlink(missing_ok=True)
            have, hasher = 0, hashlib.sha256()
            bar.reset(total=remote.size_bytes)
        elif status == 206 and not response.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
            raise DownloadError(f"the server answered a resume of {remote.name} at byte {have} with "
                                f"Content-Range {response.headers.get('Content-Range')!r}; the part file is kept.")
        elif status not in (200, 206):
            raise DownloadError(f"the server answered HTTP {status} for {remote.name}; the part file is kept.")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o644)
        try:
            for chunk in response.iter_content(CHUNK_BYTES):
                chunk = chunk[:remote.size_bytes - have]
                try:
                    _write_all(fd, chunk)
                except OSError as e:
                    if e.errno in (errno.ENOSPC, errno.EDQUOT):
                        raise DiskFullError(
                            f"The disk holding {part.parent} is full: {gb(os.fstat(fd).st_size)} of "
                            f"{gb(remote.size_bytes)} of {remote.name} is downloaded and kept in {part.name}. "
                            f"Free some space and run the installer again; it continues from there.") from e
                    raise
                hasher.update(chunk)
                have += len(chunk)
                bar.update(len(chunk))
                if have >= remote.size_bytes:
                    break
        finally:
            os.close(fd)
    return have, hasher


def download_file(session: requests.Session, remote: RemoteFile, dest_dir: Path, say=print) -> Path:
    """Make dest_dir/NAME hold exactly the remote file; fetch only what is missing. Returns the final path."""
    if remote.size_bytes is None:
        raise DownloadError(f"the Hub gives no size for {remote.path}; cannot download it safely.")
    final = dest_dir / remote.name
    if final.exists():
        if verify_file(final, remote, say):
            return final
        say(f"{final.name} on disk is damaged (wrong size or sha256); fetching it again.")
        final.unlink()
        marker_path(final).unlink(missing_ok=True)
    part = part_path(final)
    for attempt in (1, 2):
        hasher = _fetch_into_part(session, remote, part, say)
        if remote.sha256 is None or hasher.hexdigest() == remote.sha256.lower():
            os.replace(part, final)
            if remote.sha256:
                _write_marker(final, remote)
            else:
                say(f"Note: the Hub gives no sha256 for {remote.name}; only its size was checked.")
            return final
        say(f"{remote.name} came out damaged (sha256 {hasher.hexdigest()[:16]}..., expected "
            f"{remote.sha256[:16]}...); fetching it again from the start.")
        part.unlink()
    raise DownloadError(f"{remote.name} still has the wrong sha256 after a fresh download; the server or the "
                        f"catalogue is wrong. Nothing else was changed.")
