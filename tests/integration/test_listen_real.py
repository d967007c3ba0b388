"""A real vLLM server bound beyond loopback answers only requests that carry the key made for its boot."""

from __future__ import annotations

import ipaddress
import subprocess
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from pipeline.stages.prove.boot import boot
from tests.integration.conftest import CpuEngine

pytestmark = pytest.mark.integration


def _non_loopback_ipv4() -> str:
    shown = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True).stdout
    for line in shown.splitlines():
        address = line.split()[3].split("/")[0]
        if not ipaddress.ip_address(address).is_loopback:
            return address
    pytest.fail(f"this machine has no IPv4 address beyond loopback:\n{shown}")


def test_a_server_listening_beyond_loopback_requires_the_key_made_for_its_boot(
    cpu_engine: CpuEngine, tmp_path: Path
) -> None:
    address = _non_loopback_ipv4()
    profile = replace(cpu_engine.candidate.profile, listen=address)
    candidate = replace(cpu_engine.candidate, profile=profile)
    with boot(cpu_engine.entry, candidate, cache_dir=cpu_engine.cache_dir, log_dir=tmp_path) as server:
        assert server.base_url == f"http://{address}:{server.port}"
        assert [m.id for m in server.client.models()] == [cpu_engine.entry.served_model_name]  # the harness's key
        refused = httpx.get(f"{server.base_url}/v1/models", timeout=30)
        assert refused.status_code == 401, refused.text
        wrong = httpx.get(f"{server.base_url}/v1/models", headers={"Authorization": "Bearer guess"}, timeout=30)
        assert wrong.status_code == 401, wrong.text
        with pytest.raises(httpx.ConnectError):  # nothing listens on loopback
            httpx.get(f"http://127.0.0.1:{server.port}/v1/models", timeout=5)
