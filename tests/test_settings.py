import os
from pathlib import Path

import pytest

from arbiter._errors import ArbiterError
from arbiter._settings import check_settings, override, settings


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


def test_the_next_build_setting_is_read_as_written_and_checked(monkeypatch):
    monkeypatch.delenv("ARBITER_NEXT_BUILD", raising=False)
    assert check_settings().next_build == "auto"
    monkeypatch.setenv("ARBITER_NEXT_BUILD", " Early ")
    assert check_settings().next_build == "early"
    monkeypatch.setenv("ARBITER_NEXT_BUILD", "sometimes")
    assert settings().next_build == "sometimes"  # read as it is; refused where it is used
    with pytest.raises(ArbiterError, match="ARBITER_NEXT_BUILD must be one of auto, early"):
        check_settings()
