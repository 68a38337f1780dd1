"""Typed settings from GOODPUT_* variables: values parsed, bad values named."""

from __future__ import annotations

import pytest

from app.settings import Settings, SettingsError


def test_analysis_memory_from_the_environment():
    assert Settings.from_env({}).analysis_memory_bytes == 1024**3
    assert Settings.from_env({"GOODPUT_ANALYSIS_MEMORY_BYTES": "536870912"}).analysis_memory_bytes == 512 * 2**20


@pytest.mark.parametrize("value", ["lots", "1000"])
def test_bad_analysis_memory_names_the_variable(value):
    with pytest.raises(SettingsError, match="GOODPUT_ANALYSIS_MEMORY_BYTES"):
        Settings.from_env({"GOODPUT_ANALYSIS_MEMORY_BYTES": value})
