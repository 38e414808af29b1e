# The model catalogue (catalog.json): load it, validate it, and describe one choice (family + size + images).
# Which exact files a choice means is settled later, against the Hub's tree (hub_files.py).
import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CATALOG = Path(__file__).with_name("catalog.json")
SIZE_NAMES = ("Q2_0", "IQ2_XS", "IQ3_XXS")


class CatalogError(Exception):
    pass


@dataclass(frozen=True)
class FileSpec:
    """One file wanted from a repo: an exact path, or a pattern to match in the repo tree."""
    path: str | None
    pattern: str | None
    size_bytes: int | None
    sha256: str | None


@dataclass(frozen=True)
class ModelChoice:
    family: str
    size: str
    repo: str
    revision: str | None          # None: not pinned, resolve "main"
    weight_files: tuple[FileSpec, ...]
    shard_count: int
    mmproj: FileSpec | None       # always None now: llama.cpp's mmproj is not fetched (strata-vision cannot read it)
    download_gb: float
    ram_floor_gib: float
    vision: bool = False          # images asked for: the vision tower comes from the original checkpoint (vision_head)

    @property
    def name(self) -> str:
        return f"{self.family}-{self.size}"


def load_catalog(path: Path = DEFAULT_CATALOG) -> dict:
    try:
        catalog = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise CatalogError(f"cannot read the model catalogue {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise CatalogError(f"the model catalogue {path} is not valid JSON: {e}") from e
    families = catalog.get("families")
    if not isinstance(families, dict) or not families:
        raise CatalogError(f"the model catalogue {path} has no 'families'")
    for family_name, family in families.items():
        for key in ("repo", "sizes"):
            if key not in family:
                raise CatalogError(f"catalogue family '{family_name}' has no '{key}'")
        for size_name, size in family["sizes"].items():
            if not size.get("files") and not size.get("file_pattern"):
                raise CatalogError(f"catalogue size '{family_name}/{size_name}' has neither 'files' nor 'file_pattern'")
    return catalog


def family_names(catalog: dict) -> list[str]:
    return list(catalog["families"])


def size_names(catalog: dict, family: str) -> list[str]:
    return list(catalog["families"][family]["sizes"])


def _file_spec(entry: dict) -> FileSpec:
    return FileSpec(path=entry.get("path"), pattern=entry.get("file_pattern"),
                    size_bytes=entry.get("size_bytes"), sha256=entry.get("sha256"))


def describe_choice(catalog: dict, family: str, size: str, vision: bool) -> ModelChoice:
    families = catalog["families"]
    if family not in families:
        raise CatalogError(f"unknown model family '{family}'; the catalogue has: {', '.join(families)}")
    fam = families[family]
    if size not in fam["sizes"]:
        raise CatalogError(f"unknown size '{size}' for family '{family}'; the catalogue has: {', '.join(fam['sizes'])}")
    entry = fam["sizes"][size]
    if entry.get("files"):
        weights = tuple(_file_spec(f) for f in entry["files"])
    else:
        weights = (FileSpec(path=None, pattern=entry["file_pattern"], size_bytes=None, sha256=None),)
    # A catalogue's "mmproj" entry (llama.cpp's image encoder) is ignored: strata-vision reads only the vision GGUF
    # that installer/vision_head.py converts from the original checkpoint's model.visual.* tensors.
    download_gb = float(entry.get("download_gb") or 0)
    return ModelChoice(family=family, size=size, repo=fam["repo"], revision=fam.get("revision"),
                       weight_files=weights, shard_count=int(entry.get("shards") or len(weights)), mmproj=None,
                       download_gb=download_gb, ram_floor_gib=float(entry.get("ram_floor_gib") or 0), vision=vision)
