"""Images for a request, end to end on the gateway's side: the pictures' bytes (fetched when they are URLs), Pillow
and smart_resize (sizes known before anything is encoded, so the prompt length is checked first), then each picture
through strata-vision (PPM in a per-request folder, ENC, its SVE1 file) and one embeddings file holding every picture
of the prompt back to back in prompt order, for GENI. Encoded rows are kept by the picture's pixels (a follow-up turn
re-sends its pictures; the helper's rows do not depend on anything else). The request's folder is removed after it."""
from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import shutil
import struct
import tempfile

from gateway.errors import ApiError
from gateway.vision.fetch import image_bytes
from gateway.vision.helper import VisionHelper
from gateway.vision.images import PreparedImage, ResizeRule, collect_images, prepare

log = logging.getLogger("gateway.vision")
CACHE_BYTES = 256 * 1024 * 1024


class VisionService:
    def __init__(self, helper: VisionHelper, rule: ResizeRule, n_embd: int, tmp_root: str | None = None,
                 max_bytes: int = 20 * 1024 * 1024, fetch_timeout_s: float = 20.0, cache_bytes: int = CACHE_BYTES,
                 local_files: bool = False):
        self.helper = helper
        self.rule = rule
        self.n_embd = n_embd
        self.max_bytes = max_bytes
        self.fetch_timeout_s = fetch_timeout_s
        self.local_files = local_files   # file:// URLs and absolute paths (a server on this PC only)
        root = tmp_root or tempfile.gettempdir()
        os.makedirs(root, exist_ok=True)
        self.tmp_root = os.path.abspath(root)
        if " " in self.tmp_root:
            # GENI's file path cannot hold a space (protocol.md §3).
            raise SystemExit(f"the folder for image files {self.tmp_root!r} has a space in its path: name another "
                             f"with --vision-tmp")
        self.cache_bytes = cache_bytes
        self._cache: collections.OrderedDict[str, bytes] = collections.OrderedDict()
        self._cached = 0
        self.encoded = 0
        self.cache_hits = 0

    async def load(self, messages: list[dict]) -> list[PreparedImage]:
        """Every picture of the messages, in prompt order, decoded and resized (ImageError: a 400)."""
        refs = collect_images(messages)
        loop = asyncio.get_running_loop()
        out = []
        for ref in refs:
            data = await image_bytes(ref, self.max_bytes, self.fetch_timeout_s, self.local_files)
            out.append(await loop.run_in_executor(None, prepare, data, ref.where, self.rule))
        return out

    def new_request_dir(self) -> str:
        return tempfile.mkdtemp(prefix="strata-img-", dir=self.tmp_root)

    @staticmethod
    def remove(path: str | None) -> None:
        if path:
            shutil.rmtree(path, ignore_errors=True)

    async def embeddings_file(self, images: list[PreparedImage], folder: str) -> str:
        """Encodes the pictures (those not cached) and writes one SVE1 file of them all, in order; returns its path."""
        parts = []
        for k, img in enumerate(images):
            key = hashlib.sha256(img.ppm).hexdigest()
            rows = self._cache.get(key)
            if rows is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
            else:
                ppm = os.path.join(folder, f"image-{k}.ppm")
                sve = os.path.join(folder, f"image-{k}.sve")
                with open(ppm, "wb") as f:
                    f.write(img.ppm)
                n, nx, ny, ms = await self.helper.encode(ppm, sve, img.where)
                with open(sve, "rb") as f:
                    rows = f.read()
                os.remove(ppm)
                os.remove(sve)
                self._check(rows, img, n, nx, ny)
                self.encoded += 1
                log.info("%s: %dx%d picture -> %d image tokens (%dx%d) in %.0f ms", img.where, img.width, img.height,
                         n, nx, ny, ms)
                self._keep(key, rows)
            parts.append(rows)
        path = os.path.join(folder, "images.sve")
        with open(path, "wb") as f:
            for rows in parts:
                f.write(rows)
        return path

    def _check(self, rows: bytes, img: PreparedImage, n: int, nx: int, ny: int) -> None:
        head = struct.unpack("<4i", rows[4:20]) if len(rows) >= 20 else None
        want = (img.n_tokens, img.nx, img.ny, self.n_embd)
        if rows[:4] != b"SVE1" or head != want or (n, nx, ny) != want[:3] \
                or len(rows) != 20 + 4 * img.n_tokens * self.n_embd:
            raise ApiError(f"{img.where}: the vision helper's file does not hold the expected {img.nx}x{img.ny} rows "
                           f"of {self.n_embd} (header {head}, {len(rows)} bytes)")

    def _keep(self, key: str, rows: bytes) -> None:
        if len(rows) > self.cache_bytes:
            return
        self._cache[key] = rows
        self._cached += len(rows)
        while self._cached > self.cache_bytes:
            _, old = self._cache.popitem(last=False)
            self._cached -= len(old)
