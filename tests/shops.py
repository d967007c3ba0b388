"""Workshops for tests: a cache folder with the network's supply (pip and the Hub), as on a runner without a
wheelhouse."""

from __future__ import annotations

from pathlib import Path

from pipeline.infra.supply import ONLINE
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir
from pipeline.progress import Say, quiet


def online(cache_dir: Path, say: Say = quiet) -> Workshop:
    return Workshop(CacheDir(cache_dir), ONLINE, say)
