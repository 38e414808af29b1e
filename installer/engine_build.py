# Gets the engine binary: a path the user gave, a prebuilt binary for this platform shipped in prebuilt/, or a
# build from source with CMake (CUDA when nvcc and a usable GPU are there). Never downloads a toolchain.
import os
import platform
import shutil
import subprocess
from pathlib import Path

EXE_NAME = "strata.exe" if platform.system() == "Windows" else "strata"


class EngineBuildError(Exception):
    pass


def platform_tag() -> str:
    machine = platform.machine().lower().replace("amd64", "x86_64")
    return f"{platform.system().lower()}-{machine}"


def prebuilt_engine(project_dir: Path) -> Path | None:
    candidate = project_dir / "prebuilt" / platform_tag() / EXE_NAME
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def built_engine(build_dir: Path) -> Path | None:
    for candidate in (build_dir / "engine" / EXE_NAME, build_dir / "engine" / "Release" / EXE_NAME):
        if candidate.is_file():
            return candidate
    return None


def cuda_architecture() -> str:
    """The GPU's compute capability as CMake wants it (8.9 -> 89), or 'native' when nvidia-smi cannot say."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=compute_cap", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=15).stdout.split()
            if out and out[0].replace(".", "").isdigit():
                return out[0].replace(".", "")
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "native"


def _run_logged(args: list[str], log, cwd: Path) -> None:
    log.write(f"\n$ {' '.join(args)}\n")
    log.flush()
    result = subprocess.run(args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise EngineBuildError(f"the command '{' '.join(args)}' failed (exit {result.returncode})")


def _generator_args(tools: dict) -> list[str]:
    """Ninja when it is there and can find the compiler; else CMake's default (Visual Studio on Windows)."""
    if not tools.get("ninja"):
        return []
    # Ninja finds MSVC only inside a developer prompt (cl.exe on PATH); the Visual Studio generator finds it anywhere.
    if platform.system() == "Windows" and tools.get("visual studio") and not shutil.which("cl"):
        return []
    return ["-G", "Ninja"]


def build_engine(project_dir: Path, use_cuda: bool, tools: dict, say=print, jobs: int | None = None) -> Path:
    """Configure and build build/engine/strata with CMake; the full output goes to build/installer-build.log."""
    missing = [t for t in ("cmake", "c++ compiler") if not tools.get(t)]
    if use_cuda and not tools.get("nvcc"):
        missing.append("nvcc")
    if missing:
        raise EngineBuildError(f"cannot build the engine: {', '.join(missing)} missing (see the PC check above).")
    build_dir = project_dir / "build"
    build_dir.mkdir(exist_ok=True)
    log_path = build_dir / "installer-build.log"
    cmake = tools["cmake"]  # a full path: on Windows it may be the cmake.exe of the Visual Studio Build Tools
    configure = [cmake, "-S", str(project_dir), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DSTRATA_CUDA={'ON' if use_cuda else 'OFF'}"]
    if not (build_dir / "CMakeCache.txt").exists():
        configure += _generator_args(tools)
    if use_cuda:
        configure.append(f"-DCMAKE_CUDA_ARCHITECTURES={cuda_architecture()}")
    build = [cmake, "--build", str(build_dir), "--config", "Release", "--target", "strata"]
    if jobs:
        build += ["--parallel", str(jobs)]
    say(f"Building the engine ({'CUDA' if use_cuda else 'CPU only'}); this takes a few minutes. "
        f"Log: {log_path}")
    with open(log_path, "a", encoding="utf-8") as log:
        try:
            _run_logged(configure, log, project_dir)
            _run_logged(build, log, project_dir)
        except EngineBuildError as e:
            log.flush()
            tail = "\n".join(log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-25:])
            raise EngineBuildError(f"{e}. The end of {log_path}:\n{tail}") from None
    engine = built_engine(build_dir)
    if engine is None:
        raise EngineBuildError(f"the build finished but no {EXE_NAME} is in {build_dir / 'engine'}.")
    return engine


def get_engine(project_dir: Path, explicit: Path | None, use_cuda: bool, tools: dict, say=print,
               jobs: int | None = None) -> Path:
    if explicit:
        if not explicit.is_file():
            raise EngineBuildError(f"--engine {explicit}: no such file.")
        return explicit.resolve()
    prebuilt = prebuilt_engine(project_dir)
    if prebuilt:
        say(f"Using the prebuilt engine {prebuilt}.")
        return prebuilt
    return build_engine(project_dir, use_cuda, tools, say, jobs)
