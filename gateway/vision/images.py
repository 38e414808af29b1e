"""Pictures in requests, pure: find them in the messages (OpenAI `image_url` parts, Anthropic `image` blocks, in the
order the chat template renders them), their bytes (base64, data: URLs; http(s) URLs are fetched by fetch.py),
Pillow decoding (EXIF orientation applied, transparency composited onto white as transformers' convert_to_rgb does),
vision/README.md's smart_resize with Pillow BICUBIC, and the binary PPM strata-vision reads."""
from __future__ import annotations

import base64
import binascii
import io
import math
import urllib.parse
from dataclasses import dataclass

from gateway.errors import BadRequest

MAX_DECODED_PIXELS = 64 * 1024 * 1024     # a picture larger than this is refused before it is decoded


class ImageError(BadRequest):
    """A picture that cannot be used; a 400 naming the picture and what is wrong."""


@dataclass(frozen=True)
class ResizeRule:
    """vision/README.md: sides multiples of factor (patch · merge), min_pixels ≤ w·h ≤ max_pixels."""
    factor: int = 32
    min_pixels: int = 56 * 56
    max_pixels: int = 28 * 28 * 1280


@dataclass
class ImageRef:
    """A picture of the request: where it is (for messages), and its source."""
    where: str             # e.g. "messages[1].content[0]"
    kind: str              # "url" (data:, http:, https:, …) or "base64"
    value: str             # the URL, or the base64 text
    media_type: str | None = None


@dataclass
class PreparedImage:
    where: str
    width: int             # after smart_resize: multiples of factor
    height: int
    nx: int                # merged grid: width / factor, height / factor
    ny: int
    ppm: bytes             # binary PPM (P6, maxval 255) of the resized picture

    @property
    def n_tokens(self) -> int:
        return self.nx * self.ny


def is_image_part(part) -> bool:
    """The chat template's test for a picture in a content list (plus the Responses API's input_image)."""
    return isinstance(part, dict) and ("image" in part or "image_url" in part
                                       or part.get("type") in ("image", "image_url", "input_image"))


def has_images(messages: list[dict]) -> bool:
    return any(is_image_part(p) for m in messages if isinstance(m.get("content"), list) for p in m["content"])


def _ref_of(part: dict, where: str) -> ImageRef:
    source = part.get("source")
    if isinstance(source, dict):                               # Anthropic: {"type": "base64" | "url", ...}
        kind = source.get("type")
        if kind == "base64":
            data = source.get("data")
            if not isinstance(data, str) or not data:
                raise ImageError(f"{where}: source.data must be the picture as base64 text", param=where)
            return ImageRef(where, "base64", data, source.get("media_type"))
        if kind == "url":
            url = source.get("url")
            if not isinstance(url, str) or not url:
                raise ImageError(f"{where}: source.url must be a URL", param=where)
            return ImageRef(where, "url", url)
        raise ImageError(f"{where}: image source type {kind!r} is not supported (use base64 or url)", param=where)
    url = part.get("image_url", part.get("image"))
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str) or not url:
        raise ImageError(f"{where}: an image part needs image_url.url (a data: or http(s) URL)", param=where)
    return ImageRef(where, "url", url)


def collect_images(messages: list[dict]) -> list[ImageRef]:
    """The request's pictures in prompt order (the order of messages and of their parts, as the template renders
    them). A system message with a picture is refused, as the template does."""
    refs: list[ImageRef] = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if not is_image_part(part):
                continue
            where = f"messages[{i}].content[{j}]"
            if m.get("role") in ("system", "developer"):
                raise ImageError(f"{where}: a system message cannot contain images", param=where)
            refs.append(_ref_of(part, where))
    return refs


def b64decode(text: str, where: str) -> bytes:
    try:
        return base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageError(f"{where}: the picture is not valid base64 ({e})", param=where) from e


def data_url_bytes(url: str, where: str) -> bytes:
    """data:[<media type>][;base64],<data>"""
    head, comma, body = url[5:].partition(",")
    if not comma:
        raise ImageError(f"{where}: a data: URL needs a comma before its data", param=where)
    if head.lower().endswith(";base64"):
        return b64decode(body, where)
    return urllib.parse.unquote_to_bytes(body)


def url_scheme(url: str) -> str:
    return url.split(":", 1)[0].lower() if ":" in url else ""


def smart_resize(height: int, width: int, factor: int = 32, min_pixels: int = 56 * 56,
                 max_pixels: int = 28 * 28 * 1280) -> tuple[int, int]:
    """vision/README.md (transformers' qwen2_vl smart_resize), word for word. Returns (h_bar, w_bar)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError("absolute aspect ratio must be smaller than 200")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def to_rgb(img):
    """transformers' convert_to_rgb: a picture with transparency (an A band or info["transparency"]) is made RGBA and
    composited onto white; any other is convert("RGB")."""
    from PIL import Image
    if "A" in img.getbands() or img.info.get("transparency") is not None:
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return img.convert("RGB")


def decode(data: bytes, where: str):
    """Pillow decoding of any format it reads, the EXIF orientation applied; the first frame of an animation."""
    from PIL import Image, ImageOps, UnidentifiedImageError
    if not data:
        raise ImageError(f"{where}: the picture is empty (0 bytes)", param=where)
    try:
        img = Image.open(io.BytesIO(data))
        w, h = img.size
        if w * h > MAX_DECODED_PIXELS:
            raise ImageError(f"{where}: the picture is {w}x{h} pixels, more than the {MAX_DECODED_PIXELS:,} this "
                             f"server decodes", param=where)
        img.load()
        img = ImageOps.exif_transpose(img)
    except ImageError:
        raise
    except UnidentifiedImageError as e:
        raise ImageError(f"{where}: the bytes are not a picture Pillow can read ({len(data)} bytes, starting "
                         f"{data[:8]!r})", param=where) from e
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError, EOFError) as e:
        raise ImageError(f"{where}: the picture cannot be decoded: {e}", param=where) from e
    return img


def prepare(data: bytes, where: str, rule: ResizeRule) -> PreparedImage:
    """Bytes → the resized RGB picture as PPM, as vision/README.md requires (smart_resize, Pillow BICUBIC)."""
    from PIL import Image
    img = decode(data, where)
    w, h = img.size
    try:
        h_bar, w_bar = smart_resize(h, w, rule.factor, rule.min_pixels, rule.max_pixels)
    except ValueError as e:
        raise ImageError(f"{where}: the picture is {w}x{h} pixels; {e} (the longer side may be at most 200 times "
                         f"the shorter)", param=where) from e
    if h_bar * w_bar > rule.max_pixels or h_bar < rule.factor or w_bar < rule.factor:
        raise ImageError(f"{where}: a {w}x{h} picture cannot be resized within {rule.min_pixels}..{rule.max_pixels} "
                         f"pixels in steps of {rule.factor} (it would be {w_bar}x{h_bar})", param=where)
    rgb = to_rgb(img).resize((w_bar, h_bar), Image.BICUBIC)
    buf = io.BytesIO()
    rgb.save(buf, "PPM")
    return PreparedImage(where, w_bar, h_bar, w_bar // rule.factor, h_bar // rule.factor, buf.getvalue())


def expand_image_pads(ids: list[int], pad_id: int, counts: list[int]) -> list[int]:
    """The k-th `<|image_pad|>` of the rendered prompt becomes counts[k] copies (one per row of that picture)."""
    found = sum(1 for t in ids if t == pad_id)
    if found != len(counts):
        raise BadRequest(f"the prompt holds {found} <|image_pad|> tokens but the request has {len(counts)} "
                         f"pictures (is '<|image_pad|>' written in the text?)", param="messages")
    out: list[int] = []
    k = 0
    for t in ids:
        if t == pad_id:
            out.extend([pad_id] * counts[k])
            k += 1
        else:
            out.append(t)
    return out
