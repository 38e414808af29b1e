# The installer's downloads against the Hub-like server, through the real `python -m installer` process:
# resume after kill -9, corrupted files fetched again, 404s, HF_TOKEN, and the files kept after each failure.
import hashlib
import signal
import subprocess

from installer_helpers import (PROJECT_DIR, REPO, SHARD_NAMES, installer_command, installer_env, models_dir,
                               piece_sizes, run_installer, wait_for)


def test_download_killed_mid_file_resumes_from_bytes_on_disk(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 3_000_000, seed=1)
    second = hub.add_file(SHARD_NAMES[1], 500_000, seed=2)
    hub.state.bytes_per_s = 1_000_000
    home = tmp_path / "home"
    part = models_dir(home) / (SHARD_NAMES[0] + ".part")
    process = subprocess.Popen(installer_command(hub, home), cwd=PROJECT_DIR, env=installer_env(hub),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        wait_for(lambda: sum(n for _, n in piece_sizes([part])) >= 700_000, 60, "the first shard to be partly on disk")
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    kept = part.stat().st_size
    assert 0 < kept < len(first), f"the kill should land mid-file, but the part file has {kept} bytes"
    assert not (models_dir(home) / SHARD_NAMES[0]).exists()

    hub.state.bytes_per_s = None
    gets_before = len(hub.state.file_gets(SHARD_NAMES[0]))
    result = run_installer(hub, home)
    assert result.returncode == 0, result.stdout + result.stderr
    resumed = hub.state.file_gets(SHARD_NAMES[0])[gets_before:]
    assert [r["range"] for r in resumed] == [f"bytes={kept}-"], resumed
    assert f"Resuming {SHARD_NAMES[0]}" in result.stdout
    assert (models_dir(home) / SHARD_NAMES[0]).read_bytes() == first
    assert (models_dir(home) / SHARD_NAMES[1]).read_bytes() == second
    assert not part.exists()


def test_corrupted_file_on_disk_is_detected_and_fetched_again(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 400_000, seed=3)
    hub.add_file(SHARD_NAMES[1], 100_000, seed=4)
    home = tmp_path / "home"
    assert run_installer(hub, home).returncode == 0
    target = models_dir(home) / SHARD_NAMES[0]
    damaged = bytearray(target.read_bytes())
    damaged[200_000] ^= 0xFF          # same size, one byte wrong
    target.write_bytes(bytes(damaged))

    gets_before = len(hub.state.file_gets(SHARD_NAMES[0]))
    result = run_installer(hub, home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{SHARD_NAMES[0]} on disk is damaged" in result.stdout
    assert [r["range"] for r in hub.state.file_gets(SHARD_NAMES[0])[gets_before:]] == [None]
    assert target.read_bytes() == first
    # The untouched shard is not fetched again.
    assert len(hub.state.file_gets(SHARD_NAMES[1])) == 1


def test_corrupted_part_file_is_detected_after_resume_and_fetched_from_zero(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 400_000, seed=5)
    hub.add_file(SHARD_NAMES[1], 100_000, seed=6)
    home = tmp_path / "home"
    part = models_dir(home) / (SHARD_NAMES[0] + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(bytes(150_000))   # zeros: the right length to resume from, the wrong bytes

    result = run_installer(hub, home)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "came out damaged" in result.stdout
    assert [r["range"] for r in hub.state.file_gets(SHARD_NAMES[0])] == ["bytes=150000-", None]
    assert (models_dir(home) / SHARD_NAMES[0]).read_bytes() == first


def test_404_mid_download_gives_a_clear_message_and_keeps_finished_files(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 1_000_000, seed=7)
    hub.add_file(SHARD_NAMES[1], 100_000, seed=8)
    hub.state.bytes_per_s = 2_000_000
    home = tmp_path / "home"
    process = subprocess.Popen(installer_command(hub, home), cwd=PROJECT_DIR, env=installer_env(hub),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    # The file list is read before any byte; then the second shard disappears from the server.
    wait_for(lambda: hub.state.file_gets(SHARD_NAMES[0]), 30, "the first shard's download to start")
    (hub.repo_dir / SHARD_NAMES[1]).unlink()
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 1, output
    assert f"{SHARD_NAMES[1]} was not found" in output and "HTTP 404" in output and "EntryNotFound" in output
    assert "is kept" in output
    assert (models_dir(home) / SHARD_NAMES[0]).read_bytes() == first


def test_missing_repo_gives_a_clear_message(hub, tmp_path):
    hub.catalog.write_text(hub.catalog.read_text().replace(REPO, "test-org/No-Such-Repo"))
    result = run_installer(hub, tmp_path / "home")
    assert result.returncode == 1
    assert "test-org/No-Such-Repo" in result.stdout and "HTTP 404" in result.stdout
    assert "RepoNotFound" in result.stdout


def test_hf_token_is_sent_when_the_hub_needs_one(hub, tmp_path):
    data = hub.add_file(SHARD_NAMES[0], 50_000, seed=9)
    hub.add_file(SHARD_NAMES[1], 50_000, seed=10)
    hub.state.required_token = "hf_test_token"
    refused = run_installer(hub, tmp_path / "home")
    assert refused.returncode == 1 and "HF_TOKEN" in refused.stdout
    accepted = run_installer(hub, tmp_path / "home", env=installer_env(hub, HF_TOKEN="hf_test_token"))
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert (models_dir(tmp_path / "home") / SHARD_NAMES[0]).read_bytes() == data


def test_catalogue_hash_that_disagrees_with_the_hub_is_refused(hub, tmp_path):
    hub.add_file(SHARD_NAMES[0], 10_000, seed=11)
    hub.add_file(SHARD_NAMES[1], 10_000, seed=12)
    wrong = hashlib.sha256(b"not the file").hexdigest()
    hub.catalog.write_text(hub.catalog.read_text().replace(
        '"files": null', f'"files": [{{"path": "{SHARD_NAMES[0]}", "sha256": "{wrong}"}}, '
                         f'{{"path": "{SHARD_NAMES[1]}"}}]'))
    result = run_installer(hub, tmp_path / "home")
    assert result.returncode == 1
    assert wrong in result.stdout and "disagree" in result.stdout
    assert hub.state.file_gets(SHARD_NAMES[0]) == []


def test_connection_dropped_mid_file_is_resumed_within_the_same_run(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 3_000_000, seed=13)
    hub.add_file(SHARD_NAMES[1], 10_000, seed=14)
    hub.state.drop_after_bytes = 1_234_567
    result = run_installer(hub, tmp_path / "home")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Connection problem" in result.stdout
    ranges = [r["range"] for r in hub.state.file_gets(SHARD_NAMES[0])]
    assert len(ranges) == 2 and ranges[0] is None
    resumed_at = int(ranges[1][len("bytes="):-1])
    assert 0 < resumed_at <= 1_234_567
    assert (models_dir(tmp_path / "home") / SHARD_NAMES[0]).read_bytes() == first
