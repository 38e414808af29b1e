# --gguf-dir: files the user already has are checked against the Hub and used in place; missing ones are fetched
# into that folder; with the Hub unreachable, complete local files are used (said to be unverified).
import socket

from installer_helpers import SHARD_NAMES, installer_env, run_installer


def dead_endpoint() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"   # nothing listens there once the socket closes


def test_files_already_in_gguf_dir_are_verified_and_not_downloaded(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 200_000, seed=1)
    second = hub.add_file(SHARD_NAMES[1], 100_000, seed=2)
    mine = tmp_path / "my-ggufs"
    mine.mkdir()
    (mine / SHARD_NAMES[0]).write_bytes(first)
    result = run_installer(hub, tmp_path / "home", "--gguf-dir", str(mine))
    assert result.returncode == 0, result.stdout + result.stderr
    assert hub.state.file_gets(SHARD_NAMES[0]) == []                 # verified by hash, not fetched
    assert len(hub.state.file_gets(SHARD_NAMES[1])) == 1             # the missing shard goes into the same folder
    assert (mine / SHARD_NAMES[1]).read_bytes() == second
    assert f"All model files are in {mine} and checked." in result.stdout
    assert not (tmp_path / "home" / "models").exists()


def test_damaged_file_in_gguf_dir_is_replaced(hub, tmp_path):
    first = hub.add_file(SHARD_NAMES[0], 200_000, seed=3)
    hub.add_file(SHARD_NAMES[1], 100_000, seed=4)
    mine = tmp_path / "my-ggufs"
    mine.mkdir()
    (mine / SHARD_NAMES[0]).write_bytes(first[:-1] + b"\0")
    result = run_installer(hub, tmp_path / "home", "--gguf-dir", str(mine))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is damaged" in result.stdout
    assert (mine / SHARD_NAMES[0]).read_bytes() == first


def test_unreachable_hub_uses_complete_local_files_and_says_they_are_unverified(hub, tmp_path):
    mine = tmp_path / "my-ggufs"
    mine.mkdir()
    (mine / SHARD_NAMES[0]).write_bytes(b"first shard")
    env = installer_env(hub, HF_ENDPOINT=dead_endpoint())
    missing_one = run_installer(hub, tmp_path / "home", "--gguf-dir", str(mine), env=env)
    assert missing_one.returncode == 1
    assert "could not reach" in missing_one.stdout and "internet connection" in missing_one.stdout

    (mine / SHARD_NAMES[1]).write_bytes(b"second shard")
    complete = run_installer(hub, tmp_path / "home", "--gguf-dir", str(mine), env=env)
    assert complete.returncode == 0, complete.stdout + complete.stderr
    assert f"Using the files in {mine} as they are" in complete.stdout and "not verified" in complete.stdout
