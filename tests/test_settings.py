import os
from pathlib import Path

from arbiter.settings import override, settings


def test_settings_follow_the_environment_as_it_changes(monkeypatch, tmp_path):
    monkeypatch.delenv("ARBITER_CC", raising=False)
    assert settings().cc == "gcc"
    monkeypatch.setenv("ARBITER_CC", "clang-19")
    assert settings().cc == "clang-19"
    with override(cc="cc", cache_dir=tmp_path):
        assert (settings().cc, settings().cache_dir) == ("cc", tmp_path)
    assert settings().cc == "clang-19"
    monkeypatch.delenv("ARBITER_CC")
    assert settings().cc == "gcc"


def test_a_cache_dir_that_is_not_utf8_reads_as_os_environ_decodes_it(monkeypatch):
    raw = b"/tmp/arbiter-\xff-cache"
    monkeypatch.setenv("ARBITER_CACHE_DIR", os.fsdecode(raw))
    assert settings().cache_dir == Path(os.environ["ARBITER_CACHE_DIR"])
    assert os.fsencode(str(settings().cache_dir)) == raw
