"""Memory before a boot on this host's real /proc: the page cache really dropped (the suite runs as root, as CI does;
as another user `sudo -n` is tried and its refusal reported), and a need the host cannot meet names real holders."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.config.bundle import ConfigPaths, load_config
from pipeline.config.matrix import MemoryRules
from pipeline.stages.prove.memory import drop_page_cache, make_room, read_meminfo

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]


def test_a_need_this_host_cannot_meet_is_refused_with_the_real_holders_named(tmp_path: Path) -> None:
    config = load_config(ConfigPaths(ROOT / "models.yaml", ROOT / "thresholds", ROOT / "golden"))
    entry = next(e for e in config.matrix.entries if e.profile == "cpu")
    total = read_meminfo()["MemTotal"]
    rules = MemoryRules(drop_caches=True, wait_s=1.0, overhead_gib=10 * total)
    room = make_room(entry, replace(config.matrix.profiles["cpu"], memory=rules), tmp_path)
    assert room is not None and not room.ok and room.available_gib is not None
    assert room.available_gib <= total and 1.0 <= room.waited_s < 5.0
    assert room.holders and all(pid > 0 and gib > 0 for pid, _, gib in room.holders)
    assert f"needs {room.need.gib:.1f} GiB (KV cache 1 GiB + engine and weights" in room.reason
    assert "largest holders: " in room.reason
    if os.geteuid() == 0:
        assert room.dropped == "dropped"


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping the page cache directly needs root")
def test_root_drops_the_page_cache(tmp_path: Path) -> None:
    assert drop_page_cache(tmp_path) == "dropped"
