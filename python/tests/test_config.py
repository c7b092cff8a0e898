"""spillway.show_config(): what the installed build records and what it finds here."""

from __future__ import annotations

import pytest

import spillway
from spillway import _config


def test_show_config_dicts_agrees_with_the_machine_queries():
    cfg = spillway.show_config("dicts")
    assert cfg["version"] == spillway.__version__
    assert cfg["distribution"] == "spillway-cu13"
    assert cfg["cuda_architectures"], "the build recorded no CUDA architectures"
    assert cfg["cuda_toolkit_built_with"].startswith("13.")
    assert len(cfg["devices"]) == spillway.device_count()
    assert cfg["host_fallback"] == (not spillway.gpu_available())
    assert cfg["no_gpu_reason"] == spillway.no_gpu_reason()


def test_show_config_prints_and_returns_none(capsys):
    assert spillway.show_config() is None
    out = capsys.readouterr().out
    assert f"spillway {spillway.__version__}" in out
    assert "CUDA architectures:" in out and "host fallback:" in out


def test_show_config_refuses_other_modes():
    with pytest.raises(ValueError, match="mode"):
        spillway.show_config("json")


def test_every_gpu_seen_has_code_in_this_module(gpu):
    for d in spillway.show_config("dicts")["devices"]:
        assert not d["code"].startswith("none"), f"GPU {d['ordinal']} ({d['name']}): {d['code']}"


@pytest.mark.parametrize("cc, archs, runs", [
    ((9, 0), "80-real,90a-real,90-virtual", "sm_90a"),
    ((8, 6), "80-real,90a-real,90-virtual", "sm_80"),
    ((10, 0), "80-real,90a-real,90-virtual", "compute_90 (PTX"),  # no wgmma: plain 90
    ((12, 0), "80-real,90a-real,90-virtual", "compute_90 (PTX"),
    ((7, 5), "80-real,90a-real,90-virtual", "none"),
    ((10, 0), "90a", "none"),  # 90a SASS and PTX run on 9.0 only
    ((9, 0), "80", "compute_80 (PTX"),  # a bare entry is SASS and PTX; SASS stays within its major
])
def test_which_code_a_gpu_runs(cc, archs, runs):
    assert _config._code_for(cc, _config._parse_archs(archs)).startswith(runs)
