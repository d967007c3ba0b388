"""Unit tests are pure: starting a process or opening a network connection here fails the test."""

from __future__ import annotations

import socket
import subprocess

import pytest


@pytest.fixture(autouse=True)
def _no_processes_or_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("unit tests start no process and open no socket; move this test to tests/integration")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "bind", refuse)
