# How the installer gets the engine: a given path, a prebuilt binary for this platform, or a real CMake build
# (here of a one-file stand-in project, so the test takes seconds); a failed build shows the end of its log.
import os

import pytest

from installer.engine_build import EngineBuildError, get_engine, platform_tag
from installer.pc_check import find_tools


def make_project(root, main_cpp: str):
    (root / "engine").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.20)\nproject(t LANGUAGES CXX)\n"
                                         "add_subdirectory(engine)\n")
    (root / "engine" / "CMakeLists.txt").write_text("add_executable(strata main.cpp)\n")
    (root / "engine" / "main.cpp").write_text(main_cpp)
    return root


def test_given_path_then_prebuilt_binary_are_used_without_building(tmp_path):
    project = make_project(tmp_path / "project", "this would not compile")
    given = tmp_path / "my-strata"
    given.write_text("#!/bin/sh\n")
    assert get_engine(project, given, use_cuda=False, tools={}) == given.resolve()
    with pytest.raises(EngineBuildError, match="no such file"):
        get_engine(project, tmp_path / "missing", use_cuda=False, tools={})

    prebuilt = project / "prebuilt" / platform_tag() / "strata"
    prebuilt.parent.mkdir(parents=True)
    prebuilt.write_text("#!/bin/sh\n")
    prebuilt.chmod(0o755)
    assert get_engine(project, None, use_cuda=False, tools={}, say=lambda _: None) == prebuilt


def test_cmake_build_produces_the_engine_and_a_failed_build_shows_its_log(tmp_path):
    tools = find_tools()
    project = make_project(tmp_path / "good", "int main() { return 0; }\n")
    engine = get_engine(project, None, use_cuda=False, tools=tools, say=lambda _: None, jobs=2)
    assert engine == project / "build" / "engine" / "strata" and os.access(engine, os.X_OK)
    assert "-DSTRATA_CUDA=OFF" in (project / "build" / "installer-build.log").read_text()

    broken = make_project(tmp_path / "broken", "int main() { return missing_name; }\n")
    with pytest.raises(EngineBuildError) as failure:
        get_engine(broken, None, use_cuda=False, tools=tools, say=lambda _: None, jobs=2)
    assert "failed" in str(failure.value) and "missing_name" in str(failure.value)


def test_missing_build_tools_are_named(tmp_path):
    project = make_project(tmp_path / "project", "int main() { return 0; }\n")
    with pytest.raises(EngineBuildError, match="cmake, c\\+\\+ compiler missing"):
        get_engine(project, None, use_cuda=False, tools={"cmake": None, "c++ compiler": None})
    with pytest.raises(EngineBuildError, match="nvcc"):
        get_engine(project, None, use_cuda=True, tools={"cmake": "/usr/bin/cmake", "c++ compiler": "/usr/bin/c++"})


def test_windows_build_uses_ninja_only_where_it_can_find_msvc(monkeypatch):
    # Windows cannot be caused here: the OS name and PATH lookups are stand-ins for a PC with the Build Tools.
    import installer.engine_build as engine_build
    tools = {"ninja": r"C:\ninja.exe", "visual studio": r"C:\BuildTools"}
    monkeypatch.setattr(engine_build.platform, "system", lambda: "Windows")
    monkeypatch.setattr(engine_build.shutil, "which", lambda name: None)
    assert engine_build._generator_args(tools) == []  # a plain window: the Visual Studio generator
    monkeypatch.setattr(engine_build.shutil, "which", lambda name: r"C:\VC\cl.exe" if name == "cl" else None)
    assert engine_build._generator_args(tools) == ["-G", "Ninja"]  # a developer prompt
    assert engine_build._generator_args({"ninja": None, "visual studio": r"C:\BuildTools"}) == []
