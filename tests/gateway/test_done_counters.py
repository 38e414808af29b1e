"""protocol.md §4: DONE may carry optional key=value counters after its ten fields (an engine with an expert cache
writes the hybrid path's time split there); the gateway's parser accepts them and reads the ten as before."""
import pytest

from gateway.engine.protocol import Done, ProtocolError, parse_line


def test_done_with_counters_parses_like_ten_fields():
    plain = parse_line("DONE 3 9 1.2 40.0 length 0 0 4 7 8")
    extra = parse_line("DONE 3 9 1.2 40.0 length 0 0 4 7 8 cpu_ms=12.3 gpu_wait_ms=4.0 cpu_bytes=5529600")
    assert isinstance(extra, Done) and extra == plain


def test_done_with_too_few_fields_is_still_an_error():
    with pytest.raises(ProtocolError):
        parse_line("DONE 3 9 1.2 40.0 length 0 0 4 7")
