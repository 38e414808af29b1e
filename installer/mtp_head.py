# The MTP draft head (speculative decoding) for the chosen model: the catalogue names the original checkpoint
# (or nothing yet), its mtp.* tensors are fetched by byte range (mtp_fetch.py) and converted to a GGUF once
# (engine/tools/mtp_extract.py), next to the model files. Also runnable by hand:
#   python -m installer.mtp_head --repo ORG/NAME [--revision REV] --out FILE.gguf [--outtype q8_0|bf16]
import argparse
import sys
from pathlib import Path

from installer.checkpoint_source import CheckpointSource, already_made, finish_fetch, start_fetch
from installer.download import DownloadError
from installer.hub_api import HubError, resolve_url
from installer.mtp_fetch import MtpFetchError, fetch_tensors, get_small, mtp_extract

# Bytes of the converted file per parameter, for the disk check.
BYTES_PER_PARAM = {"q8_0": 34 / 32, "bf16": 2, "f16": 2, "f32": 4}
MtpSource = CheckpointSource


def mtp_source(catalog: dict, family: str) -> MtpSource | None:
    """The original checkpoint the catalogue names for this family's MTP head, or None when it names none."""
    entry = catalog["families"][family].get("mtp") or {}
    repo = entry.get("checkpoint_repo")
    return MtpSource(repo, entry.get("revision")) if repo else None


def mtp_file_name(family: str, outtype: str) -> str:
    return f"{family}-MTP-{outtype.upper()}.gguf"


def _fetch_small_file(session, repo: str, commit: str, name: str, dest: Path, required: bool) -> None:
    body = get_small(session, resolve_url(repo, commit, name), f"{name} of {repo}@{commit[:12]}",
                     missing_ok=not required)
    if body is not None:
        dest.write_bytes(body)


def _check_fits_main_model(hp, main_gguf: Path | None) -> None:
    """Refuses a checkpoint that is not the main model's (before gigabytes are fetched)."""
    if main_gguf is None:
        return
    from gguf_read import GGUFFile   # engine/tools, on sys.path through mtp_fetch
    try:
        fields = GGUFFile(str(main_gguf)).fields
    except (OSError, ValueError, KeyError) as e:
        raise MtpFetchError(f"cannot read the model file {main_gguf} to check the MTP head against it: {e}") from e
    arch = "qwen4exp"
    want = {"block_count": hp.n_layer, "embedding_length": hp.n_embd, "expert_count": hp.n_expert,
            "hyper_connection.count": hp.hc, "attention.head_count": hp.n_head}
    differ = [f"{k} {fields[f'{arch}.{k}'][0]} vs {v}" for k, v in want.items()
              if f"{arch}.{k}" in fields and fields[f"{arch}.{k}"][0] != v]
    if differ:
        raise MtpFetchError(f"the checkpoint's config.json does not describe the model in {main_gguf.name} "
                            f"(model file vs checkpoint: {', '.join(differ)}); its MTP head would not fit.")


def make_mtp_head(source: MtpSource, out: Path, outtype: str = mtp_extract.DEFAULT_OUTTYPE,
                  main_gguf: Path | None = None, say=print) -> Path:
    """out, fetched and converted unless an earlier run already made it from the same source."""
    if already_made(out, source):   # the file name holds the output type
        say(f"MTP head: {out} (converted earlier from {source.repo}).")
        return out
    session, commit, work_dir = start_fetch(source, out, "MTP head", say)
    _fetch_small_file(session, source.repo, commit, "config.json", work_dir / "config.json", required=True)
    _fetch_small_file(session, source.repo, commit, "generation_config.json", work_dir / "generation_config.json",
                      required=False)
    try:
        hp = mtp_extract.load_hparams(str(work_dir))
        _check_fits_main_model(hp, main_gguf)
        tensors = fetch_tensors(session, source.repo, commit, hp, work_dir, BYTES_PER_PARAM[outtype], say)
        say(f"Converting the MTP head to {out.name} ({outtype.upper()}) ...")
        mtp_extract.write_mtp_gguf(tensors, str(work_dir), str(out), outtype, name=source.repo.split("/")[-1])
    except mtp_extract.ConvertError as e:
        raise MtpFetchError(f"{source.repo}@{commit[:12]}: {e}") from e
    return finish_fetch(source, out, commit, outtype, work_dir, "MTP head", say)


def mtp_head_for(catalog: dict, family: str, model_dir: Path, main_gguf: Path | None, outtype: str,
                 say=print) -> Path | None:
    """The installer's step: the family's MTP head file, or None (said why) when the catalogue names no checkpoint."""
    source = mtp_source(catalog, family)
    if source is None:
        say(f"\nThe model catalogue names no original checkpoint for '{family}' (mtp.checkpoint_repo is not set), "
            f"so the MTP draft head is skipped: Strata runs without speculative decoding.")
        return None
    return make_mtp_head(source, model_dir / mtp_file_name(family, outtype), outtype, main_gguf, say)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m installer.mtp_head",
                                 description="Fetch only the mtp.* tensors of a Hub checkpoint and write the MTP GGUF.")
    ap.add_argument("--repo", required=True, help="the original safetensors checkpoint, ORG/NAME")
    ap.add_argument("--revision", help="branch, tag or commit (default: main)")
    ap.add_argument("--out", type=Path, required=True, help="the MTP GGUF to write")
    ap.add_argument("--outtype", default=mtp_extract.DEFAULT_OUTTYPE, choices=mtp_extract.OUTTYPES)
    ap.add_argument("--model", type=Path, help="the main model GGUF (first shard), to check the head fits it")
    args = ap.parse_args(argv)
    return run_fetch_command(lambda: make_mtp_head(MtpSource(args.repo, args.revision), args.out.resolve(),
                                                   args.outtype, args.model), "The MTP head")


def run_fetch_command(make, what: str) -> int:
    """The exit status of a by-hand fetch (make()): 0; 1 after a Hub or download error, said; 130 when stopped."""
    try:
        make()
    except (HubError, DownloadError) as e:
        print(f"\n{what} was not made: {e}", flush=True)
        return 1
    except KeyboardInterrupt:
        print("\nStopped. The fetch continues where it left off when run again.", flush=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
