# The installer's judgements from PC facts (demo fallback, driver, recommendations) and the four questions'
# answering rules (Enter = recommended, numbers, names), on given facts and typed answers.
from installer.catalog import describe_choice, load_catalog
from installer.pc_check import GpuInfo, PcFacts, check_pc
from installer.pc_report import cpu_only_warning, judge_pc
from installer.questions import Asker
from installer.recommend import KV_BYTES_PER_TOKEN, KV_VRAM_SHARE, parse_context, recommend_context, recommend_size

import pytest


def facts(ram_gib: float, gpu: GpuInfo | None) -> PcFacts:
    return PcFacts(os_name="Linux", gpus=[gpu] if gpu else [], nvidia_smi_found=gpu is not None,
                   ram_total_gib=ram_gib, ram_available_gib=ram_gib - 2, cpu_name="x", cpu_flags={"avx2"},
                   physical_cores=6, logical_cores=12, disk_free_gib=500,
                   tools={"cmake": "/usr/bin/cmake", "c++ compiler": "/usr/bin/c++", "ninja": None, "nvcc": None})


RTX_5070 = GpuInfo("NVIDIA GeForce RTX 5070", "580.65", 11.9, 11.2)


def test_real_catalogue_loads_and_describes_every_choice():
    catalog = load_catalog()
    for family in ("original", "swift"):
        for size in ("Q2_0", "IQ2_XS", "IQ3_XXS"):
            choice = describe_choice(catalog, family, size, vision=True)
            assert choice.shard_count == 2 and choice.mmproj is None and choice.vision and choice.ram_floor_gib > 0
    with pytest.raises(Exception, match="unknown size 'Q9'"):
        describe_choice(catalog, "original", "Q9", vision=False)


def test_size_is_recommended_from_ram():
    catalog = load_catalog()
    assert recommend_size(catalog, "original", 62.5) == "IQ3_XXS"     # a 64 GB PC fits every size
    assert recommend_size(catalog, "original", 47.0) == "IQ2_XS"      # a 48 GB PC: the 2-bit ones only
    assert recommend_size(catalog, "original", 31.0) is None


def test_context_is_recommended_from_vram():
    assert recommend_context(facts(64, None)) == 8192
    # The engine's KV cache is F32 (55.5 KiB a token): 32K takes 1.7 GiB of a 12 GB card, 64K 3.5 GiB of a 24 GB one.
    assert recommend_context(facts(64, RTX_5070)) == 32768
    assert recommend_context(facts(64, GpuInfo("RTX 3090", "590.1", 24.0, 23.0))) == 65536
    assert recommend_context(facts(64, GpuInfo("RTX 5090", "590.1", 31.5, 30.0))) == 131072
    for vram in (6.0, 8.0, 11.9, 16.0, 24.0, 48.0, 96.0):
        context = recommend_context(facts(64, GpuInfo("GPU", "590.1", vram, vram - 1)))
        assert context * KV_BYTES_PER_TOKEN <= KV_VRAM_SHARE * vram * 1024 ** 3 or context == 8192
    assert parse_context("32K") == 32768 and parse_context("65536") == 65536
    with pytest.raises(ValueError, match="'lots'"):
        parse_context("lots")


def test_pc_without_gpu_or_with_old_driver_is_judged_unable_and_says_why():
    no_gpu = judge_pc(facts(64, None))
    assert not no_gpu.gpu_ok and no_gpu.problems == ["no NVIDIA GPU"]
    old = judge_pc(facts(64, GpuInfo("RTX 4070", "552.22", 12.0, 11.0)))
    assert not old.gpu_ok and any("580" in line and "552.22" in line for line in old.lines)
    good = judge_pc(facts(64, RTX_5070))
    assert good.gpu_ok and good.problems == []
    small_ram = judge_pc(facts(32, RTX_5070))
    assert small_ram.problems == ["only 32 GB of RAM"]


def test_this_machine_is_read_without_errors(tmp_path):
    pc = check_pc(tmp_path)
    assert pc.ram_total_gib > 0 and pc.logical_cores >= 1 and pc.disk_free_gib > 0


def test_questions_take_enter_as_the_recommendation_and_accept_numbers_and_names():
    replies = iter(["", "3", "swift", "nonsense", "1", "16k", "n"])
    shown = []
    asker = Asker(interactive=True, input_fn=lambda prompt: next(replies), say=shown.append)
    options = [("Q2_0", ""), ("IQ2_XS", ""), ("IQ3_XXS", "")]
    assert asker.choose("size?", options, "IQ2_XS") == "IQ2_XS"
    assert asker.choose("size?", options, "IQ2_XS") == "IQ3_XXS"
    assert asker.choose("family?", [("original", ""), ("swift", "")], "original") == "swift"
    assert asker.choose("family?", [("original", ""), ("swift", "")], "swift") == "original"
    assert any("'nonsense' is not one of the choices" in line for line in shown)
    assert asker.context(65536) == 16384
    assert asker.yes_no("images?", True) is False
    assert Asker(interactive=False, say=shown.append).context(32768) == 32768


def test_a_usable_gpu_without_nvcc_is_warned_about():
    with_gpu = facts(64, RTX_5070)
    warning = cpu_only_warning(judge_pc(with_gpu), with_gpu)
    assert warning and "RTX 5070" in warning and "CUDA Toolkit" in warning and "--setup" in warning
    with_gpu.tools["nvcc"] = "/usr/local/cuda/bin/nvcc"
    assert cpu_only_warning(judge_pc(with_gpu), with_gpu) is None
    no_gpu = facts(64, None)
    assert cpu_only_warning(judge_pc(no_gpu), no_gpu) is None      # nothing to gain from CUDA there


def test_images_are_not_asked_about_where_the_catalogue_has_no_source(capsys):
    import copy

    from installer.main import ask_questions, build_parser
    args = build_parser().parse_args(["--yes"])
    catalog = load_catalog()
    assert catalog["families"]["original"]["vision"]["checkpoint_repo"] is None   # as published today
    answers = ask_questions(args, catalog, facts(64, RTX_5070), gpu_ok=True)
    assert answers.vision is False and "Images: not available for 'original' yet" in capsys.readouterr().out
    named = copy.deepcopy(catalog)
    named["families"]["original"]["vision"]["checkpoint_repo"] = "Org/Checkpoint"
    assert ask_questions(args, named, facts(64, RTX_5070), gpu_ok=True).vision is True   # asked: yes on a GPU
