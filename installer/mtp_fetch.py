# Fetches only some tensors of a sharded safetensors checkpoint on the Hub (those the MTP GGUF needs, or the vision
# tower's: a TensorFilter says which): the index, each needed shard's header (two small Range requests), then exactly
# the needed byte ranges (adjacent ones merged), kept on disk as pieces that continue after a kill or restart.
# A whole shard is never downloaded.
import errno
import json
import math
import os
import re
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable
from pathlib import Path

import requests
from tqdm import tqdm

from installer.download import DiskFullError, DownloadError, gb
from installer.hub_api import resolve_url

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "engine" / "tools"))
import mtp_extract  # noqa: E402  (engine/tools: the safetensors header reader and the MTP GGUF writer)

INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"
CHUNK_BYTES = 64 << 10      # also the resume granularity after a kill
CONNECT_RETRIES = 5
PLAN_VERSION = 2


class MtpFetchError(DownloadError):
    """The wanted tensors cannot be fetched; the message says why and what was kept."""


@dataclass(frozen=True)
class TensorFilter:
    """Which tensors of a checkpoint to fetch, and the check of what was found before any tensor byte is fetched."""
    label: str                                  # "MTP tensors", "vision tensors": in messages
    bar: str                                    # the progress bar's title
    name_of: Callable[[str], str | None]        # checkpoint key -> the name it is kept under, None when not wanted
    in_index: Callable[[list], None]            # wanted names seen in the index -> raises MtpFetchError when unusable
    check: Callable[[dict], None]               # {name: (dtype, shape)} of all wanted tensors -> raises when unusable
    plan_id: str = "mtp"                        # kept in plan.json: a plan made for another filter is not reused


def mtp_filter(hp) -> TensorFilter:
    """The tensors the MTP GGUF needs (engine/tools/mtp_extract.py), under their canonical names."""
    def name_of(key):
        n = mtp_extract.canonical_name(key)
        return n if n and mtp_extract.is_needed(n, hp) else None

    def in_index(names):
        if not any(n.startswith("mtp.") for n in names):
            raise MtpFetchError(f"no mtp.* tensors in its {INDEX_NAME} (it holds no multi-token-prediction layer).")

    def check(found):
        try:
            mtp_extract.check_structure(hp, found)
        except mtp_extract.ConvertError as e:
            raise MtpFetchError(str(e)) from e
    return TensorFilter("MTP tensors", "MTP head", name_of, in_index, check, "mtp")


@dataclass
class PieceTensor:
    name: str          # canonical name (mtp.…, model.layers.N.ple.…)
    dtype: str
    shape: list
    offset: int        # byte offset inside the piece


@dataclass
class Piece:
    """One merged byte range [start, end) of one shard, saved as its own file."""
    shard: str
    shard_size: int
    start: int
    end: int
    tensors: list

    @property
    def file_name(self) -> str:
        return f"{Path(self.shard).stem}.{self.start}-{self.end}.bin"

    @property
    def size(self) -> int:
        return self.end - self.start


def _refuse_whole_file(shard: str, url: str) -> MtpFetchError:
    return MtpFetchError(f"the server ignored the Range request for {shard} (HTTP 200 instead of 206, {url}). "
                         f"Fetching only some tensors needs Range support; the whole shard is not downloaded.")


def _check_status(response: requests.Response, what: str, url: str) -> None:
    status = response.status_code
    if status == 404:
        raise MtpFetchError(f"{what} was not found at {url} (HTTP 404, "
                            f"{response.headers.get('X-Error-Code', 'no error code')}).")
    if status in (401, 403):
        raise MtpFetchError(f"the Hub refused {what} (HTTP {status}). If the repo needs a login (or its licence "
                            f"must be accepted on the website first), set HF_TOKEN to an access token and run again.")
    if status == 416:
        raise MtpFetchError(f"the server says {what} does not exist in the file (HTTP 416, "
                            f"{response.headers.get('Content-Range')}); the shard is shorter than its header says.")
    if status >= 500:
        raise requests.ConnectionError(f"HTTP {status} from the server for {what}")


def _content_range(response: requests.Response, what: str) -> tuple[int, int, int]:
    """(first, last, total) of a 206 answer."""
    m = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+)", response.headers.get("Content-Range", ""))
    if not m:
        raise MtpFetchError(f"the server's answer for {what} has no usable Content-Range "
                            f"({response.headers.get('Content-Range')!r}).")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _retrying(what: str, attempt):
    """attempt() with retries on dropped connections (a small request: it is simply made again)."""
    for failures in range(CONNECT_RETRIES + 1):
        try:
            return attempt()
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as e:
            if failures == CONNECT_RETRIES:
                raise MtpFetchError(f"the connection kept failing while reading {what} ({e}). Check the internet "
                                    f"connection (or HF_ENDPOINT) and run again.") from e
            time.sleep(failures + 1)


def get_small(session: requests.Session, url: str, what: str, missing_ok: bool = False) -> bytes | None:
    """A small file (config, index) in memory; None for a 404 when missing_ok."""
    def attempt():
        response = session.get(url, timeout=60)
        if response.status_code == 404 and missing_ok:
            return None
        _check_status(response, what, url)
        if response.status_code != 200:
            raise MtpFetchError(f"the server answered HTTP {response.status_code} for {what} ({url}).")
        return response.content
    return _retrying(what, attempt)


def get_range(session: requests.Session, url: str, first: int, last: int, what: str) -> tuple[bytes, int]:
    """Bytes first..last (inclusive) of a small remote range, in memory; returns (bytes, file size)."""
    def attempt():
        with session.get(url, headers={"Range": f"bytes={first}-{last}"}, stream=True, timeout=60) as response:
            _check_status(response, what, url)
            if response.status_code == 200:
                raise _refuse_whole_file(what, url)
            got_first, got_last, total = _content_range(response, what)
            if (got_first, got_last) != (first, last):
                raise MtpFetchError(f"asked for bytes {first}-{last} of {what}, the server answered "
                                    f"{got_first}-{got_last}.")
            data = b""
            for chunk in response.iter_content(CHUNK_BYTES):
                data += chunk
                if len(data) >= last - first + 1:
                    break
        if len(data) < last - first + 1:
            raise requests.ConnectionError(f"{len(data)} of {last - first + 1} bytes arrived")
        return data[:last - first + 1], total
    return _retrying(what, attempt)


def read_index(session: requests.Session, repo: str, commit: str) -> dict[str, str]:
    """{tensor key: shard file} from the index; a single-file checkpoint has no index."""
    body = get_small(session, resolve_url(repo, commit, INDEX_NAME), f"{INDEX_NAME} of {repo}", missing_ok=True)
    if body is None:
        return {}
    try:
        weight_map = json.loads(body)["weight_map"]
    except (ValueError, KeyError, TypeError) as e:
        raise MtpFetchError(f"{INDEX_NAME} of {repo}@{commit[:12]} has no weight_map.") from e
    return weight_map


def read_shard_header(session, repo: str, commit: str, shard: str) -> tuple[dict, int]:
    """({key: TensorEntry}, file size) of one remote shard, from two Range requests."""
    url = resolve_url(repo, commit, shard)
    first8, size = get_range(session, url, 0, 7, f"the header length of {shard}")
    n = mtp_extract.header_length(first8, shard)
    header, size2 = get_range(session, url, 8, 8 + n - 1, f"the header of {shard}")
    if size2 != size:
        raise MtpFetchError(f"{shard} changed size between two requests ({size} then {size2} bytes).")
    return mtp_extract.parse_header(header, n, size, shard), size


def merge_pieces(shard: str, shard_size: int, wanted: list[tuple[str, object]]) -> list[Piece]:
    """[(canonical name, TensorEntry)] of one shard -> pieces, adjacent byte ranges merged."""
    pieces: list[Piece] = []
    for name, e in sorted(wanted, key=lambda t: t[1].start):
        if pieces and pieces[-1].end == e.start:
            piece = pieces[-1]
        else:
            piece = Piece(shard, shard_size, e.start, e.start, [])
            pieces.append(piece)
        piece.tensors.append(PieceTensor(name, e.dtype, list(e.shape), e.start - piece.start))
        piece.end = e.end
    return pieces


def make_plan(session, repo: str, commit: str, wanted_filter: TensorFilter) -> dict:
    """Reads the index and the needed shards' headers; checks what was found before any tensor byte is fetched."""
    weight_map = read_index(session, repo, commit)
    if weight_map:
        names = {k: wanted_filter.name_of(k) for k in weight_map}
        shards = sorted({weight_map[k] for k, n in names.items() if n})
        try:
            wanted_filter.in_index([n for n in names.values() if n])
        except MtpFetchError as e:
            raise MtpFetchError(f"the checkpoint {repo}@{commit[:12]} has {e}") from e
    else:
        shards = [SINGLE_NAME]
    wanted_by_shard, sizes, found = {}, {}, {}
    for shard in shards:
        entries, sizes[shard] = read_shard_header(session, repo, commit, shard)
        wanted = [(wanted_filter.name_of(k), e) for k, e in entries.items()]
        wanted = [(n, e) for n, e in wanted if n]
        wanted_by_shard[shard] = wanted
        found.update({n: (e.dtype, tuple(e.shape)) for n, e in wanted})
    try:
        wanted_filter.check(found)
    except MtpFetchError as e:
        raise MtpFetchError(f"{repo}@{commit[:12]}: {e}") from e
    pieces = [p for shard in shards for p in merge_pieces(shard, sizes[shard], wanted_by_shard[shard])]
    return {"version": PLAN_VERSION, "repo": repo, "commit": commit, "filter": wanted_filter.plan_id,
            "pieces": [asdict(p) for p in pieces]}


def load_plan(path: Path, repo: str, commit: str, plan_id: str = "mtp") -> list[Piece] | None:
    try:
        plan = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if plan.get("version") != PLAN_VERSION or plan.get("repo") != repo or plan.get("commit") != commit \
            or plan.get("filter", "mtp") != plan_id:
        return None
    return [Piece(p["shard"], p["shard_size"], p["start"], p["end"], [PieceTensor(**t) for t in p["tensors"]])
            for p in plan["pieces"]]


def _write_body(response, fd: int, limit: int, bar, label: str = "MTP tensors") -> int:
    written = 0
    for chunk in response.iter_content(CHUNK_BYTES):
        chunk = chunk[:limit - written]
        try:
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFullError(f"the disk is full while fetching the {label}; the pieces fetched so far "
                                    f"are kept. Free some space and run the installer again.") from e
            raise
        written += len(chunk)
        bar.update(len(chunk))
        if written >= limit:
            break
    return written


def fetch_piece(session, repo: str, commit: str, piece: Piece, work_dir: Path, bar, say,
                label: str = "MTP tensors") -> Path:
    """Brings one piece to its full size on disk, continuing from the bytes already there."""
    final = work_dir / piece.file_name
    if final.exists() and final.stat().st_size == piece.size:
        return final
    final.unlink(missing_ok=True)
    part = final.with_name(final.name + ".part")
    have = part.stat().st_size if part.exists() else 0
    if have > piece.size:
        part.unlink()
        have = 0
    url = resolve_url(repo, commit, piece.shard)
    what = f"bytes {piece.start}-{piece.end - 1} of {piece.shard}"
    failures = 0
    while have < piece.size:
        first, last = piece.start + have, piece.end - 1
        try:
            with session.get(url, headers={"Range": f"bytes={first}-{last}"}, stream=True, timeout=60) as response:
                _check_status(response, what, url)
                if response.status_code == 200:
                    raise _refuse_whole_file(piece.shard, url)
                got_first, got_last, size = _content_range(response, what)
                if size != piece.shard_size:
                    raise MtpFetchError(f"{piece.shard} is {size} bytes on the server now, {piece.shard_size} when "
                                        f"its header was read; delete {work_dir} and run again.")
                if got_first != first or got_last > last:
                    raise MtpFetchError(f"asked for bytes {first}-{last} of {piece.shard}, the server answered "
                                        f"{got_first}-{got_last}; the pieces on disk are kept.")
                fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_BINARY", 0), 0o644)
                try:
                    got = _write_body(response, fd, got_last - first + 1, bar, label)
                finally:
                    os.close(fd)
            if got == 0:
                raise requests.ConnectionError(f"the server sent no bytes of {what} from {first}")
            failures = 0
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as e:
            failures += 1
            if failures > CONNECT_RETRIES:
                raise MtpFetchError(f"the connection kept failing while fetching {what} ({e}); the bytes fetched "
                                    f"so far are kept in {work_dir}. Run the installer again to continue.") from e
            say(f"Connection problem ({type(e).__name__}) while fetching {what}; retrying in {failures} s ...")
            time.sleep(failures)
        have = part.stat().st_size if part.exists() else 0
    if have != piece.size:
        raise MtpFetchError(f"{part} has {have} bytes, expected {piece.size}; delete it and run again.")
    os.replace(part, final)
    return final


def _on_disk(work_dir: Path, piece: Piece) -> int:
    final = work_dir / piece.file_name
    if final.exists() and final.stat().st_size == piece.size:
        return piece.size
    part = final.with_name(final.name + ".part")
    return min(part.stat().st_size, piece.size) if part.exists() else 0


def fetch_tensors(session, repo: str, commit: str, hp, work_dir: Path, out_bytes_per_param: float,
                  say=print, wanted_filter: TensorFilter | None = None) -> "mtp_extract.TensorSource":
    """All pieces of the plan on disk in work_dir; returns where each needed tensor is. The tensors are the MTP
    head's (hp: mtp_extract's hparams) unless wanted_filter says otherwise (hp is then unused)."""
    wanted_filter = wanted_filter or mtp_filter(hp)
    label = wanted_filter.label
    work_dir.mkdir(parents=True, exist_ok=True)
    plan_path = work_dir / "plan.json"
    pieces = load_plan(plan_path, repo, commit, wanted_filter.plan_id)
    if pieces is None:
        plan = make_plan(session, repo, commit, wanted_filter)
        plan_path.write_text(json.dumps(plan, indent=1))
        pieces = load_plan(plan_path, repo, commit, wanted_filter.plan_id)
    total = sum(p.size for p in pieces)
    have = sum(_on_disk(work_dir, p) for p in pieces)
    params = sum(math.prod(t.shape) for p in pieces for t in p.tensors)
    needed = (total - have) + int(params * out_bytes_per_param)
    free = shutil.disk_usage(work_dir).free
    if needed + min(1 << 30, needed // 20) > free:
        raise DiskFullError(f"not enough free disk space in {work_dir} for the {wanted_filter.bar}: it needs about "
                            f"{gb(needed)} (the tensors and the converted file), {gb(free)} is free.")
    shards = sorted({p.shard for p in pieces})
    say(f"{label[0].upper() + label[1:]}: {gb(total)} in {len(pieces)} byte range(s) of {len(shards)} shard(s)"
        + (f"; {gb(have)} already on disk." if have else "."))
    located = {}
    with tqdm(total=total, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=wanted_filter.bar,
              dynamic_ncols=True) as bar:
        for piece in pieces:
            path = fetch_piece(session, repo, commit, piece, work_dir, bar, say, label)
            for t in piece.tensors:
                located[t.name] = mtp_extract.Located(str(path), t.offset, t.dtype, tuple(t.shape))
    return mtp_extract.TensorSource(located)
