# Writes strata-<name>.json (engine and model paths, host, port, API key, context, sampling defaults) and
# run-<name>.sh / run-<name>.bat that start it through installer.launcher; finds the config of earlier runs.
import json
import os
import platform
import shlex
import stat
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

# Greedy decoding: the model's own answer (PRODUCT.md section 5); the chat page and API requests may override.
GREEDY_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "presence_penalty": 0.0}


@dataclass
class StrataConfig:
    name: str                       # "original-Q2_0", "demo"
    model: str                      # the GGUF the gateway is given (the first shard)
    engine: str
    context: int
    host: str = "127.0.0.1"
    port: int = 8080
    api_key: str | None = None
    model_files: list[str] = field(default_factory=list)
    mmproj: str | None = None       # configs of older installers only; no longer written
    vision_model: str | None = None  # the vision GGUF (installer/vision_head.py): --vision-model, images on
    engine_args: list[str] = field(default_factory=list)   # extra `strata --serve` arguments, e.g. --mtp FILE
    demo: bool = False
    demo_note: str | None = None
    family: str | None = None
    size: str | None = None
    sampling_defaults: dict = field(default_factory=lambda: dict(GREEDY_SAMPLING))
    python: str = sys.executable
    project_dir: str = ""


def config_path(home_dir: Path, name: str) -> Path:
    return home_dir / f"strata-{name}.json"


def run_script_path(home_dir: Path, name: str) -> Path:
    return home_dir / (f"run-{name}.bat" if platform.system() == "Windows" else f"run-{name}.sh")


def write_config(home_dir: Path, config: StrataConfig) -> Path:
    path = config_path(home_dir, config.name)
    body = {"_comment": "Written by the Strata installer. run-" + config.name + " starts Strata with these "
                        "settings; run the installer with --setup to change the choices."}
    body.update(asdict(config))
    path.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    return path


def load_config(path: Path) -> StrataConfig:
    try:
        body = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"cannot read the Strata config {path}: {e}") from e
    body.pop("_comment", None)
    known = StrataConfig.__dataclass_fields__
    missing = [k for k in ("name", "model", "engine", "context") if k not in body]
    if missing:
        raise ValueError(f"the Strata config {path} lacks {', '.join(missing)}")
    return StrataConfig(**{k: v for k, v in body.items() if k in known})


def write_run_script(home_dir: Path, config: StrataConfig, cfg_path: Path) -> Path:
    path = run_script_path(home_dir, config.name)
    if platform.system() == "Windows":
        text = (f"@echo off\r\nrem Starts Strata ({config.name}) with {cfg_path.name}; written by the installer.\r\n"
                f"cd /d \"{config.project_dir}\"\r\n"
                f"\"{config.python}\" -m installer.launcher \"{cfg_path}\" %*\r\n"
                f"if errorlevel 1 pause\r\n")
        path.write_text(text, encoding="utf-8", newline="")
    else:
        text = (f"#!/bin/sh\n# Starts Strata ({config.name}) with {cfg_path.name}; written by the installer.\n"
                f"cd {shlex.quote(config.project_dir)} || exit 1\n"
                f"exec {shlex.quote(config.python)} -m installer.launcher {shlex.quote(str(cfg_path))} \"$@\"\n")
        path.write_text(text, encoding="utf-8")
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def latest_config(home_dir: Path) -> Path | None:
    """The config written most recently (what a plain later run starts)."""
    configs = [p for p in home_dir.glob("strata-*.json") if p.is_file()]
    return max(configs, key=os.path.getmtime) if configs else None
