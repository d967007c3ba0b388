"""`spark-nightly list | fetch | install | dockerfile | image | retain`: the published nights, from the user's side."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.config.bundle import Config
from pipeline.config.matrix import Profile
from pipeline.errors import UsageError
from pipeline.infra.files import sha256_of
from pipeline.infra.image import build_image, image_tag
from pipeline.infra.safe_files import shown
from pipeline.progress import to_stderr
from pipeline.settings import PUBLIC_API, Settings
from pipeline.stages.release.fetch import fetch_night, install, write_image_context
from pipeline.stages.release.publish import apply_retention, read_index
from pipeline.stages.release.site import build_site, read_nights
from pipeline.stages.release.stores import open_store
from pipeline.stages.release.verify import LOCK, verify_fetched

Runner = Callable[[argparse.Namespace, Settings, Config], int]


def add_parsers(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> dict[str, Runner]:
    """Register the subcommands; returns each one's runner by name."""
    listing = commands.add_parser("list", parents=[common], help="published nights with their verdicts, newest last")
    listing.add_argument("--json", action="store_true", help="print the index as JSON")
    fetch = commands.add_parser(
        "fetch",
        parents=[common],
        help="download a night's wheels and lock, every sha256 checked against its manifest",
    )
    fetch.add_argument("--night", default="latest", help="latest (default), a date YYYY-MM-DD, or a tag")
    fetch.add_argument("--dest", default="nightly", help="folder to download into (default: %(default)s)")
    inst = commands.add_parser(
        "install", parents=[common], help="install a fetched night's lock into a venv, hashes required"
    )
    inst.add_argument("--venv", required=True, help="the venv to create")
    inst.add_argument("--from", dest="source", required=True, help="the folder fetch wrote (DEST/TAG)")
    docker = commands.add_parser(
        "dockerfile", parents=[common], help="render a Dockerfile and context that build the runtime image"
    )
    docker.add_argument("--from", dest="source", required=True, help="the folder fetch wrote (DEST/TAG)")
    docker.add_argument("--out", required=True, help="the build context to write")
    image = commands.add_parser(
        "image",
        parents=[common],
        help="a published night to a runtime image in one step: fetch, verify, render, docker build",
    )
    image.add_argument("--night", default="latest", help="latest (default), a date YYYY-MM-DD, or a tag")
    image.add_argument("--dest", default="nightly", help="folder for the fetched night and its context")
    image.add_argument("--tag", help="the image's tag (default: spark-nightly/runtime:<the lock's digest>)")
    site = commands.add_parser(
        "site",
        parents=[common],
        help="the static site of every published night, from the release store alone (for GitHub Pages)",
    )
    site.add_argument("--out", required=True, metavar="DIR", help="where to write index.html and a page per night")
    retain = commands.add_parser("retain", parents=[common], help="delete nights beyond publish.keep_nights")
    retain.add_argument("--keep", action="append", default=[], metavar="TAG", help="also keep this night")
    retain.add_argument("--dry-run", action="store_true", help="say what would be deleted, delete nothing")
    return {
        "list": _list,
        "fetch": _fetch,
        "install": _install,
        "dockerfile": _dockerfile,
        "image": _image,
        "retain": _retain,
        "site": _site,
    }


def _list(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    index = read_index(open_store(settings))
    if args.json:
        print(json.dumps(index, indent=2, sort_keys=True))
        return 0
    if not index["nights"]:
        print("no published nights")
        return 0
    for night in index["nights"]:
        summary = ", ".join(f"{count} {status}" for status, count in sorted(night["summary"].items()))
        commits = " ".join(f"{name}@{commit[:9]}" for name, commit in sorted(night["commits"].items()))
        latest = "  <- latest" if night["tag"] == index["latest"] else ""
        keep = " (kept)" if night.get("keep") else ""
        print(f"{night['tag']:22} {night['verdict']:5} {summary:30} {commits}{keep}{latest}")
    return 0


def _site(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    nights = read_nights(open_store(settings), say=to_stderr)
    public = settings.publish_target == "github" and settings.github_api_url.rstrip("/") == PUBLIC_API
    repo = settings.publish_repo

    def release_url(tag: str) -> str:
        return f"https://github.com/{repo}/releases/tag/{tag}"

    out = Path(args.out)
    written = build_site(nights, out, release_url=release_url if public else None)
    counted = f"{len(nights)} published night" + ("" if len(nights) == 1 else "s")
    print(f"site: {counted}, {len(written)} files in {out} (open {out / 'index.html'})")
    return 0


def _fetch(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    fetched = fetch_night(open_store(settings), args.night, Path(args.dest), say=to_stderr)
    print(f"fetched {fetched.tag}: {len(fetched.wheels)} wheel(s) and {LOCK} in {fetched.folder}, all verified")
    return 0


def _install(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    venv = Path(args.venv)
    if venv.exists():
        raise UsageError(f"{venv} exists: install creates a new venv, so name one that does not")
    install(Path(args.source), venv, venv.parent, say=to_stderr)
    print(f"installed {Path(args.source) / LOCK} into {venv}")
    return 0


def _dockerfile(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    source, out = Path(args.source), Path(args.out)
    profile = _profile_of(verify_fetched(source).manifest, config)
    dockerfile = write_image_context(source, out, profile)
    print(f"wrote {dockerfile} and its context; build it with: docker build -t spark-nightly/runtime {out}")
    return 0


def _image(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    fetched = fetch_night(open_store(settings), args.night, Path(args.dest), say=to_stderr)
    profile = _profile_of(fetched.manifest, config)
    context = Path(args.dest) / f"{fetched.tag}-image"
    write_image_context(fetched.folder, context, profile)
    tag = args.tag or image_tag(sha256_of(fetched.lock)[:16])
    to_stderr(f"image: docker build -t {tag} {context} (log {context / 'docker-build.log'})")
    build_image(context, tag)
    print(f"built {tag} from {fetched.tag} ({len(fetched.wheels)} wheel(s) and {LOCK}, all verified)")
    return 0


def _profile_of(manifest: dict[str, Any], config: Config) -> Profile:
    """The hardware profile the night was tested on, which decides the image's base and torch."""
    name = manifest["profile"]
    if name not in config.matrix.profiles:
        known = ", ".join(sorted(config.matrix.profiles))
        raise UsageError(f"the night was tested on profile '{shown(name)}', which models.yaml lacks ({known})")
    return config.matrix.profiles[name]


def _retain(args: argparse.Namespace, settings: Settings, config: Config) -> int:
    store = open_store(settings)
    deleted = apply_retention(store, settings.publish_keep_nights, args.keep, dry_run=args.dry_run, say=to_stderr)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"retention: {verb} {len(deleted)} night(s), keeping the last {settings.publish_keep_nights} and marked ones")
    return 0
