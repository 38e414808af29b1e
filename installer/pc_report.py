# Turns PcFacts into plain-language lines for the user, and decides whether this PC can run the real model
# (otherwise the installer serves the demo model). Recommendations for the four questions are in recommend.py.
import platform
from dataclasses import dataclass

from installer.pc_check import PcFacts

MIN_DRIVER_MAJOR = 580          # CUDA 13 needs an NVIDIA driver >= 580
MIN_VRAM_GIB = 7.5              # an 8 GB card; less leaves no room for the mixers and KV cache
MIN_RAM_GIB = 44                # the smallest size's RAM floor (catalog.json); checked per size too


@dataclass
class PcVerdict:
    lines: list[str]            # what to show, in order
    gpu_ok: bool
    problems: list[str]         # why the real model will not run here (empty = it can)


def _tool_install_hint(tool: str) -> str:
    if platform.system() == "Windows":
        return {"cmake": "install CMake (cmake.org, 'Add to PATH')",
                "c++ compiler": "install 'Build Tools for Visual Studio' with the C++ workload",
                "nvcc": "install the CUDA Toolkit 13 from NVIDIA",
                "ninja": "optional"}[tool]
    return {"cmake": "sudo apt-get install cmake", "c++ compiler": "sudo apt-get install build-essential",
            "nvcc": "install the CUDA Toolkit 13 (nvidia-cuda-toolkit or NVIDIA's packages)",
            "ninja": "optional: sudo apt-get install ninja-build"}[tool]


def judge_pc(facts: PcFacts) -> PcVerdict:
    lines, problems = [f"System: {facts.os_name}"], []
    gpu = facts.best_gpu
    gpu_ok = False
    if gpu is None:
        why = ("nvidia-smi found no NVIDIA GPU" if facts.nvidia_smi_found
               else "no NVIDIA GPU found (nvidia-smi is not installed)")
        lines.append(f"  GPU:     MISSING - {why}. Strata needs an NVIDIA GPU with 8 GB or more for the real model.")
        problems.append("no NVIDIA GPU")
    else:
        lines.append(f"  GPU:     {gpu.name}, {gpu.vram_total_gib:.1f} GB VRAM ({gpu.vram_free_gib:.1f} GB free)")
        if gpu.driver_major < MIN_DRIVER_MAJOR:
            lines.append(f"  Driver:  TOO OLD - {gpu.driver_version}; CUDA 13 needs driver {MIN_DRIVER_MAJOR} "
                         f"or newer. Update the NVIDIA driver, then run the installer again with --setup.")
            problems.append(f"NVIDIA driver {gpu.driver_version} is older than {MIN_DRIVER_MAJOR}")
        else:
            lines.append(f"  Driver:  {gpu.driver_version} (ok for CUDA 13)")
        if gpu.vram_total_gib < MIN_VRAM_GIB:
            lines.append(f"  VRAM:    TOO SMALL - {gpu.vram_total_gib:.1f} GB; the real model needs 8 GB or more.")
            problems.append(f"only {gpu.vram_total_gib:.1f} GB of VRAM")
        gpu_ok = gpu.driver_major >= MIN_DRIVER_MAJOR and gpu.vram_total_gib >= MIN_VRAM_GIB
    ram_note = "" if facts.ram_total_gib >= MIN_RAM_GIB else \
        f" - TOO LITTLE for the real model (the smallest size needs {MIN_RAM_GIB} GB; 64 GB fits every size)"
    lines.append(f"  RAM:     {facts.ram_total_gib:.1f} GB ({facts.ram_available_gib:.1f} GB available){ram_note}")
    if facts.ram_total_gib < MIN_RAM_GIB:
        problems.append(f"only {facts.ram_total_gib:.0f} GB of RAM")
    simd = "AVX-512" if "avx512f" in facts.cpu_flags else "AVX2" if "avx2" in facts.cpu_flags else None
    lines.append(f"  CPU:     {facts.cpu_name}, {facts.physical_cores} cores ({facts.logical_cores} threads), "
                 + (f"{simd} ok" if simd else "no AVX2 - the CPU part will be slow"))
    lines.append(f"  Disk:    {facts.disk_free_gib:.0f} GB free where the model goes")
    for tool in ("cmake", "c++ compiler", "ninja", "nvcc"):
        path = facts.tools.get(tool)
        if path:
            lines.append(f"  {tool + ':':<8} {path}")
        elif tool != "nvcc" or gpu_ok:
            lines.append(f"  {tool + ':':<8} missing ({_tool_install_hint(tool)})")
    return PcVerdict(lines=lines, gpu_ok=gpu_ok, problems=problems)


def cpu_only_warning(verdict: PcVerdict, facts: PcFacts) -> str | None:
    """What to say when this PC's GPU could run Strata but the engine can only be built for the CPU (no nvcc)."""
    if not verdict.gpu_ok or facts.tools.get("nvcc"):
        return None
    return (f"WARNING: {facts.best_gpu.name} could run Strata, but the CUDA Toolkit (nvcc) is missing, so the engine "
            f"is built for the CPU only and runs many times slower. To use the GPU: {_tool_install_hint('nvcc')}, "
            f"then run the installer again with --setup.")
