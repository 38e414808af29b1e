# A full disk, for real: the installer's --dir on a small tmpfs (mounting one needs root, as CI runs). Checked both
# before a byte is fetched and mid-file, when something else fills the disk; what was fetched is kept and resumed.
import os
import subprocess

import pytest

from installer_helpers import (PROJECT_DIR, SHARD_NAMES, installer_command, installer_env, models_dir, piece_sizes,
                               run_installer, wait_for)


@pytest.fixture
def small_disk(tmp_path):
    mount_point = tmp_path / "small-disk"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount_point)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
    yield mount_point
    subprocess.run(["umount", str(mount_point)], check=True)


def test_not_enough_space_is_refused_before_a_byte_is_fetched(hub, small_disk):
    hub.add_file(SHARD_NAMES[0], 2_000_000, seed=1)
    hub.add_file(SHARD_NAMES[1], 2_000_000, seed=2)
    result = run_installer(hub, small_disk)
    assert result.returncode == 1
    assert "Not enough free disk space" in result.stdout and "Nothing was fetched" in result.stdout
    assert hub.state.file_gets(SHARD_NAMES[0]) == [] and hub.state.file_gets(SHARD_NAMES[1]) == []


def test_disk_filling_up_mid_file_keeps_the_bytes_and_resumes_after_space_is_freed(hub, small_disk):
    first = hub.add_file(SHARD_NAMES[0], 1_200_000, seed=3)
    second = hub.add_file(SHARD_NAMES[1], 300_000, seed=4)
    hub.state.bytes_per_s = 1_000_000
    part = models_dir(small_disk) / (SHARD_NAMES[0] + ".part")
    process = subprocess.Popen(installer_command(hub, small_disk), cwd=PROJECT_DIR, env=installer_env(hub),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    wait_for(lambda: sum(n for _, n in piece_sizes([part])) >= 200_000, 30, "the download to start")
    filler = small_disk / "another-program.bin"
    with open(filler, "wb") as f:          # another program takes the rest of the disk
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert "is full" in output and "kept in" in output and SHARD_NAMES[0] in output
    kept = part.stat().st_size
    assert 200_000 <= kept < len(first)
    assert part.read_bytes() == first[:kept]

    filler.unlink()
    hub.state.bytes_per_s = None
    gets_before = len(hub.state.file_gets(SHARD_NAMES[0]))
    result = run_installer(hub, small_disk)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [r["range"] for r in hub.state.file_gets(SHARD_NAMES[0])[gets_before:]] == [f"bytes={kept}-"]
    assert (models_dir(small_disk) / SHARD_NAMES[0]).read_bytes() == first
    assert (models_dir(small_disk) / SHARD_NAMES[1]).read_bytes() == second
    assert not os.path.exists(part)
