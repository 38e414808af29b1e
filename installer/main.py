# The installer's steps in order: start directly when set up; otherwise check the PC, ask the four questions,
# download the model (or fall back to the demo model), get the engine, write the config and run script, start.
import sys
from pathlib import Path

from installer import catalog as catalog_mod
from installer.cli import build_parser, has_choice_flags
from installer.config_writer import (StrataConfig, latest_config, load_config, run_script_path, write_config,
                                     write_run_script)
from installer.demo import DemoModelError, get_demo_model
from installer.download import DownloadError, check_disk_space, download_file
from installer.engine_build import EngineBuildError, get_engine, prebuilt_engine
from installer.hub_api import HubError, hub_endpoint, hub_session
from installer.hub_files import resolve_choice
from installer.launcher import LaunchError, start
from installer.local_files import find_local_files
from installer.mtp_head import mtp_head_for
from installer.vision_head import vision_model_for, vision_source
from installer.pc_check import check_pc
from installer.pc_report import cpu_only_warning, judge_pc
from installer.questions import Answers, Asker, stdin_is_terminal
from installer.recommend import (context_label, recommend_context, recommend_family, recommend_size,
                                 recommend_vision)

PROJECT_DIR = Path(__file__).resolve().parent.parent


class InstallError(Exception):
    """Stops the installer with a message for the user (exit code 1)."""


def say(text: str = "") -> None:
    print(text, flush=True)


def ask_questions(args, catalog: dict, facts, gpu_ok: bool) -> Answers:
    asker = Asker(interactive=not args.yes and stdin_is_terminal(), say=say)
    families = catalog["families"]
    family = args.family or asker.choose(
        "Which model?", [(name, fam.get("title", fam["repo"])) for name, fam in families.items()],
        recommend_family(catalog))
    sizes = families[family]["sizes"]
    recommended_size = recommend_size(catalog, family, facts.ram_total_gib) or min(
        sizes, key=lambda s: sizes[s].get("ram_floor_gib") or 0)
    size = args.model or asker.choose(
        f"Which size? (this PC has {facts.ram_total_gib:.0f} GB of RAM)",
        [(name, f"{s.get('download_gb', '?')} GB download, needs {s.get('ram_floor_gib', '?')} GB RAM")
         for name, s in sizes.items()], recommended_size)
    context = args.context or asker.context(recommend_context(facts))
    if args.vision is not None:
        vision = args.vision
    elif vision_source(catalog, family) is None:   # nothing to turn on: say so instead of asking
        say(f"Images: not available for '{family}' yet (the model catalogue names no original checkpoint to take "
            f"the vision tower from).")
        vision = False
    else:
        vision = asker.yes_no("Turn on images (attach pictures to messages; fetches the model's vision tower, about "
                              "1 GB)?", recommend_vision(gpu_ok))
    return Answers(family=family, size=size, context=context, vision=vision)


def download_model(args, catalog: dict, answers: Answers, home_dir: Path) -> tuple[list[Path], Path | None]:
    """Fetch (or find in --gguf-dir) the chosen files; returns (weight files in shard order, encoder or None)."""
    choice = catalog_mod.describe_choice(catalog, answers.family, answers.size, answers.vision)
    session = hub_session()
    say(f"\nLooking up {choice.repo} on {hub_endpoint()} ...")
    try:
        resolved = resolve_choice(session, choice)
    except HubError as e:
        local = find_local_files(args.gguf_dir, choice) if args.gguf_dir else None
        if local is None:
            raise
        say(f"Could not check the files with the Hub ({e})\nUsing the files in {args.gguf_dir} as they are "
            f"(their sizes and hashes were not verified).")
        return local
    if not resolved.pinned:
        say(f"Note: the catalogue pins no revision for {choice.repo} yet; using its current commit "
            f"{resolved.commit[:12]}.")
    dest_dir = args.gguf_dir or home_dir / "models" / choice.repo.split("/")[-1]
    remotes = resolved.weight_files + ([resolved.mmproj] if resolved.mmproj else [])
    check_disk_space(dest_dir, remotes)
    paths = [download_file(session, remote, dest_dir, say) for remote in remotes]
    say(f"All model files are in {dest_dir} and checked.")
    return paths[:len(resolved.weight_files)], paths[-1] if resolved.mmproj else None


def get_vision_model(args, catalog: dict, answers: Answers, weights: list[Path]) -> Path | None:
    """The vision GGUF next to the model files when images are on, or None (said why): never fatal."""
    if not answers.vision:
        return None
    try:
        return vision_model_for(catalog, answers.family, f"{answers.family}-{answers.size}", weights[0].parent,
                                say=say)
    except (HubError, DownloadError) as e:
        say(f"\nThe vision model could not be made: {e}\nStrata runs without images. Run the installer again "
            f"with --setup to retry; what was fetched is kept.")
        return None


def get_mtp_head(args, catalog: dict, answers: Answers, weights: list[Path]) -> Path | None:
    """The MTP draft head next to the model files, or None (said why): speculation is optional, never fatal."""
    if args.no_mtp:
        say("\nSkipping the MTP draft head (--no-mtp): Strata runs without speculative decoding.")
        return None
    try:
        return mtp_head_for(catalog, answers.family, weights[0].parent, weights[0], args.mtp_type, say)
    except (HubError, DownloadError) as e:
        say(f"\nThe MTP draft head could not be made: {e}\nStrata runs without speculative decoding (slower). "
            f"Run the installer again with --setup to retry; what was fetched is kept.")
        return None


def decide_demo(args, verdict) -> str | None:
    """Why the demo model is served instead of the real one, or None to go for the real model."""
    if args.demo:
        return "you asked for it with --demo"
    if verdict.problems and args.model is None and args.gguf_dir is None and not args.download_only:
        return "this PC cannot run the real model: " + "; ".join(verdict.problems)
    if verdict.problems:
        say("\nWARNING: " + "; ".join(verdict.problems)
            + ". Going on with the real model as asked; it may not run on this PC.")
    return None


def set_up(args, home_dir: Path) -> StrataConfig | None:
    """Everything up to a ready config; None when only the download was asked for."""
    say("Checking this PC ...")
    facts = check_pc(home_dir)
    verdict = judge_pc(facts)
    for line in verdict.lines:
        say(line)
    catalog = catalog_mod.load_catalog(args.catalog)
    demo_reason = decide_demo(args, verdict)
    answers, weights, mmproj, mtp, vision_model = None, [], None, None, None
    if demo_reason is None:
        answers = ask_questions(args, catalog, facts, verdict.gpu_ok)
        floor = catalog["families"][answers.family]["sizes"][answers.size].get("ram_floor_gib") or 0
        if facts.ram_total_gib < floor:
            say(f"WARNING: {answers.size} needs about {floor} GB of RAM; this PC has {facts.ram_total_gib:.0f} GB.")
        try:
            weights, mmproj = download_model(args, catalog, answers, home_dir)
        except (HubError, DownloadError) as e:
            say(f"\nThe download stopped: {e}")
            if args.download_only or args.model is not None:
                raise InstallError("the model could not be downloaded (see above).") from None
            demo_reason = ("the model could not be downloaded (see above); run the installer again with --setup "
                           "to continue the download where it stopped")
        if demo_reason is None:
            mtp = get_mtp_head(args, catalog, answers, weights)
            vision_model = get_vision_model(args, catalog, answers, weights)
    if args.download_only:
        return None
    use_cuda = verdict.gpu_ok and bool(facts.tools.get("nvcc"))
    warning = cpu_only_warning(verdict, facts)
    if warning and args.engine is None and prebuilt_engine(PROJECT_DIR) is None:
        say("\n" + warning)
    engine = get_engine(PROJECT_DIR, args.engine, use_cuda, facts.tools, say, args.jobs)
    # A given or prebuilt engine is taken to be a CUDA build (prebuilt ones are, for RTX 30/40/50) when the GPU is
    # usable; the engine itself refuses --backend cuda, with a clear message, if it was built without CUDA.
    on_gpu = verdict.gpu_ok and (use_cuda or args.engine is not None or prebuilt_engine(PROJECT_DIR) is not None)
    backend_args = ["--backend", "cuda"] if on_gpu else []
    say(f"Engine: {engine} ({'GPU' if on_gpu else 'CPU'})")
    if demo_reason is not None:
        demo = get_demo_model(PROJECT_DIR, home_dir, say)
        say(f"\nServing the DEMO model, because {demo_reason}.\nIt is {demo.description}.")
        # The demo's MTP head pays on a GPU only: on a CPU the small demo decodes faster without it (968 against
        # 615 tok/s on 2 threads, bench/results/2026-12-01-vm-draft-min-p); the text is the same either way.
        mtp_args = ["--mtp", str(demo.mtp_path)] if demo.mtp_path and on_gpu else []
        config = StrataConfig(name="demo", model=str(demo.path), model_files=[str(demo.path)], engine=str(engine),
                              context=args.context or 4096, demo=True, demo_note=demo.description,
                              engine_args=backend_args + mtp_args)
    else:
        config = StrataConfig(name=f"{answers.family}-{answers.size}", model=str(weights[0]),
                              model_files=[str(w) for w in weights], mmproj=str(mmproj) if mmproj else None,
                              vision_model=str(vision_model) if vision_model else None,
                              engine=str(engine), context=answers.context,
                              engine_args=backend_args + (["--mtp", str(mtp)] if mtp and args.speculate else []),
                              family=answers.family, size=answers.size)
        say(f"\nModel: {config.name}, context {context_label(config.context)}, images "
            f"{'on' if config.vision_model else 'off'}.")
        if mtp and not args.speculate:
            # Measured at the real model's size (H100, 2026-12-05): a window of the next token and 3 drafts took
            # 26.6 ms against 5.0 for a plain token, so drafting slows decoding even when every draft is accepted.
            say("Speculative decoding is off: its verify pass is still slower than the tokens it saves at this "
                "model's size. The MTP head is kept; --speculate turns it on.")
    config.port = args.port or 8080
    config.api_key = args.api_key
    config.project_dir = str(PROJECT_DIR)
    config.python = sys.executable
    return config


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    home_dir = (args.dir or PROJECT_DIR).resolve()
    home_dir.mkdir(parents=True, exist_ok=True)
    existing = latest_config(home_dir)
    if existing and not args.setup and not has_choice_flags(args):
        config = load_config(existing)
        if args.no_start:
            say(f"Strata is set up ({existing.name}). Start it with: {run_script_path(home_dir, config.name)}")
            return 0
        say(f"Strata is set up ({existing.name}); starting it. (Run with --setup to change the choices.)")
    else:
        config = set_up(args, home_dir)
        if config is None:
            return 0
        cfg_path = write_config(home_dir, config)
        script = write_run_script(home_dir, config, cfg_path)
        say(f"Wrote {cfg_path} and {script}.")
        if args.no_start:
            say(f"Start Strata later with: {script}")
            return 0
    return start(config, args.port, open_browser=not args.no_browser, say=say, log_dir=home_dir / "logs")


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except (InstallError, catalog_mod.CatalogError, HubError, DownloadError, EngineBuildError, DemoModelError,
            LaunchError, ValueError) as e:
        say(f"\nThe installer stopped: {e}")
        return 1
    except KeyboardInterrupt:
        say("\nStopped. Downloads continue where they left off when you run the installer again.")
        return 130
