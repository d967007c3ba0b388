"""The workshop of one night or command: the cache's places, where files come from (the night's supply) and the voice
that says what happens, made once and handed to every step that builds, fetches or makes a runtime."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.places import CacheDir
from pipeline.progress import Say, quiet

if TYPE_CHECKING:  # the supply's own module makes runtimes in a workshop
    from pipeline.infra.supply import Supply


@dataclass(frozen=True)
class Workshop:
    """The supply is required: a step that reached for pip on an offline runner once came from a default."""

    cache: CacheDir
    supply: Supply
    say: Say = quiet

    @property
    def cache_dir(self) -> Path:
        return self.cache.root

    def saying(self, say: Say) -> Workshop:
        """The same workshop with another voice (a step that reports to stderr, or says nothing)."""
        return Workshop(self.cache, self.supply, say)
