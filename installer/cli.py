# The installer's command line (setup.sh and START-HERE.bat pass their arguments through unchanged).
import argparse
from pathlib import Path

from installer.catalog import DEFAULT_CATALOG, SIZE_NAMES
from installer.recommend import parse_context


def _context(text: str) -> int:
    try:
        return parse_context(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _yes_no(text: str) -> bool:
    if text.lower() in ("yes", "y", "on", "true"):
        return True
    if text.lower() in ("no", "n", "off", "false"):
        return False
    raise argparse.ArgumentTypeError(f"--vision takes yes or no, not {text!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="setup.sh", description="Set up Strata (check the PC, choose a model, download it, build the engine) "
                                     "and start it. Later runs start directly.")
    choices = parser.add_argument_group("answers to the four questions (Enter takes the recommended one)")
    choices.add_argument("--family", choices=["original", "swift"], help="which model: original or swift")
    choices.add_argument("--model", choices=list(SIZE_NAMES), help="which size (recommended from RAM)")
    choices.add_argument("--context", type=_context, help="context in tokens, e.g. 32K or 65536 (from VRAM)")
    choices.add_argument("--vision", type=_yes_no, help="images: yes or no")
    choices.add_argument("--yes", "-y", action="store_true", help="take every recommended answer without asking")
    run = parser.add_argument_group("running")
    run.add_argument("--setup", action="store_true", help="ask the questions again even if Strata is set up")
    run.add_argument("--port", type=int, help="serve on this port (default 8080)")
    run.add_argument("--api-key", help="require this API key on /v1/* (default: none, local use only)")
    run.add_argument("--no-browser", action="store_true", help="do not open the chat page in a browser")
    run.add_argument("--no-start", action="store_true", help="set everything up but do not start the server")
    run.add_argument("--demo", action="store_true", help="serve the small demo model instead of the real one")
    files = parser.add_argument_group("files")
    files.add_argument("--gguf-dir", type=Path, help="a folder with GGUF files you already have (missing ones "
                                                     "are downloaded into it)")
    files.add_argument("--download-only", action="store_true", help="only fetch the model files, then stop")
    files.add_argument("--no-mtp", action="store_true", help="skip the MTP draft head (no speculative decoding)")
    files.add_argument("--speculate", action="store_true",
                       help="run the engine with the MTP head drafting tokens (off by default: at the real model's "
                            "size a drafted window of 4 still costs 3.1 plain passes on a GPU, "
                            "bench/results/2026-12-05-onetoken-windows)")
    files.add_argument("--mtp-type", choices=["q8_0", "bf16"], default="q8_0",
                       help="the MTP head's weight type (default q8_0, the smaller file)")
    files.add_argument("--engine", type=Path, help="use this engine binary instead of building one")
    files.add_argument("--dir", type=Path, help="where models, configs and run scripts go (default: the "
                                                "project folder)")
    files.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG, help="the model catalogue file")
    files.add_argument("--jobs", type=int, help="parallel compile jobs for the engine build")
    return parser


def has_choice_flags(args: argparse.Namespace) -> bool:
    return any(v is not None for v in (args.family, args.model, args.context, args.vision, args.gguf_dir)) \
        or args.demo or args.download_only
