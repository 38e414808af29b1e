# Finds a catalogue choice's files in a folder the user already has (--gguf-dir), by the same names and patterns
# the Hub lookup uses; used when the Hub cannot be reached to verify them.
import fnmatch
from pathlib import Path

from installer.catalog import FileSpec, ModelChoice


def _matches(folder: Path, spec: FileSpec, is_encoder: bool) -> list[Path]:
    if spec.path:
        candidate = folder / Path(spec.path).name
        return [candidate] if candidate.is_file() else []
    return sorted(p for p in folder.iterdir() if p.is_file() and fnmatch.fnmatch(p.name, Path(spec.pattern).name)
                  and (is_encoder or not p.name.startswith("mmproj")))


def find_local_files(folder: Path, choice: ModelChoice) -> tuple[list[Path], Path | None] | None:
    """(weight files in shard order, encoder or None) when the folder holds all of them, else None."""
    if not folder.is_dir():
        return None
    weights = [p for spec in choice.weight_files for p in _matches(folder, spec, is_encoder=False)]
    if len(weights) != choice.shard_count:
        return None
    mmproj = None
    if choice.mmproj:
        found = _matches(folder, choice.mmproj, is_encoder=True)
        if len(found) != 1:
            return None
        mmproj = found[0]
    return weights, mmproj
