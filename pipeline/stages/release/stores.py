"""The release store the settings name: the local folder (the embedded default) or a GitHub repository."""

from __future__ import annotations

import os

from pipeline.errors import SparkNightlyError
from pipeline.infra.github import GitHubReleaseStore
from pipeline.infra.releases import LocalReleaseStore, ReleaseStore
from pipeline.progress import to_stderr
from pipeline.settings import Settings


def open_store(settings: Settings) -> ReleaseStore:
    """The configured release store; the local one is the embedded default."""
    if settings.publish_target == "local":
        return LocalReleaseStore(settings.places.releases)
    if not settings.publish_repo:
        raise SparkNightlyError("publish.target is github but publish.repo is empty: set it to owner/name")
    token = os.environ.get(settings.github_token_env, "")
    if not token:
        raise SparkNightlyError(f"publish.target is github but ${settings.github_token_env} is not set")
    return GitHubReleaseStore(settings.publish_repo, token, api_url=settings.github_api_url, say=to_stderr)
