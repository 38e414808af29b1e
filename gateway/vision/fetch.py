"""A picture's bytes from its source: base64 or a data: URL at once; an http(s) URL fetched with a size limit and a
timeout; a local file (a file:// URL or an absolute path) read when the server listens on this PC only; any other
scheme refused. Every failure is an ImageError (400) naming the picture."""
from __future__ import annotations

import asyncio
import os
import re
import urllib.parse
import urllib.request

import aiohttp

from gateway.vision.images import ImageError, ImageRef, b64decode, data_url_bytes, url_scheme

MAX_REDIRECTS = 5


def _short(url: str) -> str:
    return url if len(url) <= 120 else url[:117] + "..."


async def fetch_url(url: str, where: str, max_bytes: int, timeout_s: float) -> bytes:
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url, max_redirects=MAX_REDIRECTS,
                                   headers={"User-Agent": "strata-gateway", "Accept": "image/*"}) as r:
                if r.status != 200:
                    raise ImageError(f"{where}: fetching {_short(url)} answered HTTP {r.status} {r.reason or ''}"
                                     .rstrip(), param=where)
                if r.content_length is not None and r.content_length > max_bytes:
                    raise ImageError(f"{where}: the picture at {_short(url)} is {r.content_length:,} bytes, more than "
                                     f"the limit of {max_bytes:,}", param=where)
                chunks, size = [], 0
                async for chunk in r.content.iter_chunked(64 * 1024):
                    size += len(chunk)
                    if size > max_bytes:
                        raise ImageError(f"{where}: the picture at {_short(url)} is more than the limit of "
                                         f"{max_bytes:,} bytes", param=where)
                    chunks.append(chunk)
                return b"".join(chunks)
    except ImageError:
        raise
    except asyncio.TimeoutError as e:
        raise ImageError(f"{where}: fetching {_short(url)} took more than {timeout_s:g} s", param=where) from e
    except (aiohttp.ClientError, OSError, ValueError) as e:
        raise ImageError(f"{where}: cannot fetch {_short(url)}: {type(e).__name__}: {e}", param=where) from e


def local_path(url: str) -> str | None:
    """The file a file:// URL or an absolute path (POSIX, or Windows C:\\ / \\\\server) names; None for anything else."""
    if url.lower().startswith("file://"):
        parsed = urllib.parse.urlparse(url)
        if parsed.netloc not in ("", "localhost"):
            return None
        return urllib.request.url2pathname(parsed.path)
    if url.startswith("/") or re.match(r"^[A-Za-z]:[\\/]", url) or url.startswith("\\\\"):
        return url
    return None


def read_local(path: str, where: str, max_bytes: int) -> bytes:
    """A local picture file. Its bytes are never quoted back in an error (it may be any file on this PC)."""
    try:
        size = os.path.getsize(path)
        if not os.path.isfile(path):
            raise ImageError(f"{where}: {path!r} is not a file", param=where)
        if size > max_bytes:
            raise ImageError(f"{where}: the picture is {size:,} bytes, more than the limit of {max_bytes:,}",
                             param=where)
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)
    except OSError as e:
        raise ImageError(f"{where}: cannot read the local picture {path!r}: {e.strerror or type(e).__name__}",
                         param=where) from e


async def image_bytes(ref: ImageRef, max_bytes: int, timeout_s: float, local_files: bool = False) -> bytes:
    """local_files: read file:// URLs and absolute paths (only a server that listens on this PC only allows it)."""
    if ref.kind == "base64":
        data = b64decode(ref.value, ref.where)
    else:
        scheme = url_scheme(ref.value)
        path = local_path(ref.value)
        if path is not None:
            if not local_files:
                raise ImageError(f"{ref.where}: local picture files are read only when the server listens on this "
                                 f"PC only (--host 127.0.0.1); send the picture as base64 or a data: URL",
                                 param=ref.where)
            data = await asyncio.get_running_loop().run_in_executor(None, read_local, path, ref.where, max_bytes)
        elif scheme == "data":
            data = data_url_bytes(ref.value, ref.where)
        elif scheme in ("http", "https"):
            return await fetch_url(ref.value, ref.where, max_bytes, timeout_s)
        else:
            raise ImageError(f"{ref.where}: image URLs must be data: (base64), http(s) or file:// URLs or absolute "
                             f"paths, not {(scheme + ':') if scheme else _short(ref.value)!r}", param=ref.where)
    if len(data) > max_bytes:
        raise ImageError(f"{ref.where}: the picture is {len(data):,} bytes, more than the limit of {max_bytes:,}",
                         param=ref.where)
    return data
