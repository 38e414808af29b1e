# The demo model: the small GGUF shipped in installer/demo/, or, while none is shipped, a tiny RANDOM model made
# with engine/tools/make_tiny.py (it runs and streams tokens, but its text is noise, not a chat model).
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

SHIPPED_DEMO = Path("installer") / "demo" / "strata-demo.gguf"
SHIPPED_DEMO_MTP = Path("installer") / "demo" / "strata-demo-mtp.gguf"   # its draft head, for speculation
TINY_CONFIG = "tiny"
TINY_GGUF_TYPE = "f32"


class DemoModelError(Exception):
    pass


@dataclass(frozen=True)
class DemoModel:
    path: Path
    is_random: bool     # True: a random test model, its answers are noise
    mtp_path: Path | None = None

    @property
    def description(self) -> str:
        if self.is_random:
            return ("a tiny RANDOM test model (no demo model is shipped yet): it shows that the engine, the API "
                    "and the chat page work, but its answers are meaningless text, not a chat model")
        return ("the small demo model that ships with Strata: 8 million parameters trained on made-up practice "
                "conversations (sums, tool calls, repeating text); it chats, thinks and calls tools in the right "
                "format but knows very little. It is not the real Qwen3.8-Flash-Next")


def _load_make_tiny(project_dir: Path):
    source = project_dir / "engine" / "tools" / "make_tiny.py"
    if not source.is_file():
        raise DemoModelError(f"no demo model is shipped ({project_dir / SHIPPED_DEMO}) and {source} is missing, "
                             f"so no stand-in can be made either.")
    spec = importlib.util.spec_from_file_location("strata_make_tiny", source)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(source.parent))   # make_tiny imports its sibling modules, also later, lazily
    try:
        spec.loader.exec_module(module)
    except ImportError as e:
        raise DemoModelError(f"cannot make the stand-in demo model: {source} needs a package that is missing "
                             f"({e}).") from e
    return module


def get_demo_model(project_dir: Path, home_dir: Path, say=print) -> DemoModel:
    shipped = project_dir / SHIPPED_DEMO
    if shipped.is_file():
        mtp = project_dir / SHIPPED_DEMO_MTP
        return DemoModel(shipped, is_random=False, mtp_path=mtp if mtp.is_file() else None)
    out_dir = home_dir / "models" / "demo-random-tiny"
    say(f"No demo model is shipped yet; making (or reusing) a tiny random test model in {out_dir} ...")
    make_tiny = _load_make_tiny(project_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        manifest = make_tiny.build(TINY_CONFIG, str(out_dir))
    except ImportError as e:
        raise DemoModelError(f"cannot make the stand-in demo model: it needs torch and transformers "
                             f"(pip install -r requirements-dev.txt): {e}") from e
    ggufs = manifest.get("gguf", {})
    path = ggufs.get(TINY_GGUF_TYPE) or next(iter(ggufs.values()), None)
    if not path or not Path(path).is_file():
        raise DemoModelError(f"make_tiny.build({TINY_CONFIG!r}) gave no usable GGUF (manifest: {ggufs}).")
    return DemoModel(Path(path), is_random=True)
