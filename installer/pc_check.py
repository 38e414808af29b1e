# Looks at the PC: NVIDIA GPU, driver, VRAM, RAM, CPU features, cores, free disk, build tools. Reads only;
# pc_report.py turns the facts into plain-language lines.
import ctypes
import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30


@dataclass
class GpuInfo:
    name: str
    driver_version: str
    vram_total_gib: float
    vram_free_gib: float

    @property
    def driver_major(self) -> int:
        match = re.match(r"(\d+)", self.driver_version)
        return int(match.group(1)) if match else 0


@dataclass
class PcFacts:
    os_name: str
    gpus: list[GpuInfo]
    nvidia_smi_found: bool
    ram_total_gib: float
    ram_available_gib: float
    cpu_name: str
    cpu_flags: set[str]
    physical_cores: int
    logical_cores: int
    disk_free_gib: float
    tools: dict[str, str | None] = field(default_factory=dict)   # tool -> path (None when missing)

    @property
    def best_gpu(self) -> GpuInfo | None:
        return max(self.gpus, key=lambda g: g.vram_total_gib) if self.gpus else None


def _run(args: list[str], timeout_s: float = 15) -> str | None:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def find_gpus() -> tuple[bool, list[GpuInfo]]:
    smi = shutil.which("nvidia-smi")
    if smi is None and platform.system() == "Windows":
        candidate = Path(os.environ.get("SystemRoot", r"C:\Windows")) / "System32" / "nvidia-smi.exe"
        smi = str(candidate) if candidate.exists() else None
    if smi is None:
        return False, []
    out = _run([smi, "--query-gpu=name,driver_version,memory.total,memory.free", "--format=csv,noheader,nounits"])
    gpus = []
    for line in (out or "").splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) == 4:
            try:
                gpus.append(GpuInfo(cells[0], cells[1], float(cells[2]) / 1024, float(cells[3]) / 1024))
            except ValueError:
                continue
    return True, gpus


def _ram_gib() -> tuple[float, float]:
    if platform.system() == "Windows":
        class MemoryStatus(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                        ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                        ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                        ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                        ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]
        status = MemoryStatus()
        status.dwLength = ctypes.sizeof(MemoryStatus)
        ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status))
        return status.ullTotalPhys / GIB, status.ullAvailPhys / GIB
    meminfo = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            key, value = line.split(":", 1)
            meminfo[key] = int(value.split()[0]) * 1024
    except (OSError, ValueError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return total / GIB, total / GIB
    return meminfo.get("MemTotal", 0) / GIB, meminfo.get("MemAvailable", 0) / GIB


def _cpu() -> tuple[str, set[str], int]:
    """CPU name, feature flags (avx2 / avx512f ...) and physical core count."""
    logical = os.cpu_count() or 1
    if platform.system() == "Windows":
        present = ctypes.windll.kernel32.IsProcessorFeaturePresent
        flags = set()
        if present(40):   # PF_AVX2_INSTRUCTIONS_AVAILABLE
            flags.add("avx2")
        if present(41):   # PF_AVX512F_INSTRUCTIONS_AVAILABLE
            flags.add("avx512f")
        # Windows has no cheap physical-core query without WMI; SMT is assumed when there are many threads.
        return platform.processor(), flags, max(1, logical // 2) if logical >= 8 else logical
    name, flags, cores = platform.processor() or "unknown CPU", set(), set()
    try:
        physical_id = core_id = None
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if key == "model name":
                name = value
            elif key == "flags":
                flags = set(value.split())
            elif key == "physical id":
                physical_id = value
            elif key == "core id":
                core_id = value
                cores.add((physical_id, core_id))
    except OSError:
        pass
    return name, flags, len(cores) or logical


def find_tools() -> dict[str, str | None]:
    compilers = ["c++", "g++", "clang++", "cl"]
    compiler = next((shutil.which(c) for c in compilers if shutil.which(c)), None)
    cmake = shutil.which("cmake")
    # Outside a developer prompt the Build Tools for Visual Studio are not on PATH: CMake's Visual Studio generator
    # finds them itself, and their optional "C++ CMake tools" bring a cmake.exe.
    visual_studio = _visual_studio_cpp() if platform.system() == "Windows" else None
    if visual_studio:
        compiler = compiler or f"{visual_studio} (MSVC)"
        bundled = Path(visual_studio) / "Common7/IDE/CommonExtensions/Microsoft/CMake/CMake/bin/cmake.exe"
        cmake = cmake or (str(bundled) if bundled.is_file() else None)
    return {"cmake": cmake, "c++ compiler": compiler, "ninja": shutil.which("ninja"),
            "nvcc": shutil.which("nvcc") or _cuda_home_nvcc(), "visual studio": visual_studio}


def _visual_studio_cpp() -> str | None:
    """The folder of the newest Visual Studio (or Build Tools) with the x64 C++ compiler, from vswhere.exe."""
    vswhere = Path(os.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / \
        "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
    if not vswhere.is_file():
        return None
    try:
        out = subprocess.run([str(vswhere), "-latest", "-products", "*", "-requires",
                              "Microsoft.VisualStudio.Component.VC.Tools.x86.x64", "-property", "installationPath"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.splitlines()[0] if out else None


def _cuda_home_nvcc() -> str | None:
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var):
            candidate = Path(os.environ[var]) / "bin" / ("nvcc.exe" if platform.system() == "Windows" else "nvcc")
            if candidate.exists():
                return str(candidate)
    return None


def check_pc(disk_path: Path) -> PcFacts:
    smi_found, gpus = find_gpus()
    ram_total, ram_available = _ram_gib()
    cpu_name, flags, physical = _cpu()
    disk_path.mkdir(parents=True, exist_ok=True)
    return PcFacts(os_name=f"{platform.system()} {platform.release()}", gpus=gpus, nvidia_smi_found=smi_found,
                   ram_total_gib=ram_total, ram_available_gib=ram_available, cpu_name=cpu_name, cpu_flags=flags,
                   physical_cores=physical, logical_cores=os.cpu_count() or 1,
                   disk_free_gib=shutil.disk_usage(disk_path).free / GIB, tools=find_tools())
