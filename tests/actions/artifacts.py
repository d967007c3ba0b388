"""The artifact and Pages actions' stand-ins, mapped by name for act (`--local-repository`): GitHub's artifact store is
a folder (`ARTIFACT_STORE`, one per workflow run), kept by the actions' documented rules. upload-artifact: a name
is taken once in a run unless `overwrite`, the artifact's root is the least common ancestor of its paths' search
paths, hidden files are left out, `if-no-files-found`; download-artifact: by name, or a pattern's artifacts each in a
folder of its name unless `merge-multiple`; upload-pages-artifact stores the site as `github-pages`, deploy-pages
serves it and fails without one. Each composite action calls `python3 artifacts.py VERB` with its inputs as
`INPUT_*` variables; the workspace is the working directory. Only the standard library: act runs it with the
host's python3."""

from __future__ import annotations

import fnmatch
import os
import shutil
import sys
from pathlib import Path

PAGES_ARTIFACT = "github-pages"  # the artifact upload-pages-artifact makes and deploy-pages serves


class ActionFailed(Exception):
    """The action fails its step with this message, as GitHub's would."""


def upload(inputs: dict[str, str], workspace: Path, store: Path) -> str:
    name = inputs["name"]
    target = store / name
    if target.exists():
        if inputs.get("overwrite", "false") != "true":
            raise ActionFailed(
                "Failed to CreateArtifact: (409) Conflict: an artifact with this name already exists on the workflow "
                f"run: {name}"
            )
        shutil.rmtree(target)
    patterns = [line.strip() for line in inputs["path"].splitlines() if line.strip()]
    include = [workspace / p for p in patterns if not p.startswith("!")]
    exclude = [str(workspace / p[1:]) for p in patterns if p.startswith("!")]
    files: list[Path] = []
    for path in include:
        if any(c in str(path) for c in "*?["):
            found = sorted(
                p for p in search_path(path).rglob("*") if p.is_file() and fnmatch.fnmatch(str(p), str(path))
            )
        elif path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file())
        else:
            found = [path] if path.is_file() else []
        files += [f for f in found if not any(fnmatch.fnmatch(str(f), e) for e in exclude)]
    files = [f for f in files if not any(part.startswith(".") for part in f.relative_to(workspace).parts)]
    if not files:
        if inputs.get("if-no-files-found", "warn") == "error":
            raise ActionFailed(f"No files were found with the provided path: {inputs['path']}")
        return f"warning: no files were found with the provided path; no artifact {name} uploaded"
    # the root is the least common ancestor of the patterns' search paths (matched or not); one file alone is
    # stored without its folders
    searched = [search_path(p) for p in include]
    root = Path(os.path.commonpath([str(p) for p in searched])) if len(searched) > 1 else searched[0]
    if root.is_file():
        root = root.parent
    for file in files:
        copy = target / file.relative_to(root)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(file, copy)
    return f"artifact {name}: {len(files)} files from {root.relative_to(workspace)}"


def search_path(pattern: Path) -> Path:
    """A pattern's fixed part: the folders before its first wildcard."""
    parts = pattern.parts
    fixed = next((i for i, part in enumerate(parts) if any(c in part for c in "*?[")), len(parts))
    return Path(*parts[:fixed])


def download(inputs: dict[str, str], workspace: Path, store: Path) -> str:
    destination = workspace / inputs["path"] if inputs.get("path") else workspace
    if inputs.get("name"):
        source = store / inputs["name"]
        if not source.exists():
            raise ActionFailed(f"Unable to download artifact(s): Artifact not found for name: {inputs['name']}")
        shutil.copytree(source, destination, dirs_exist_ok=True)
        return f"artifact {inputs['name']} into {destination}"
    pattern = inputs.get("pattern") or "*"
    found = sorted(p for p in store.iterdir() if fnmatch.fnmatchcase(p.name, pattern)) if store.is_dir() else []
    for artifact in found:
        into = destination if inputs.get("merge-multiple") == "true" else destination / artifact.name
        shutil.copytree(artifact, into, dirs_exist_ok=True)
    return f"{len(found)} artifacts matching {pattern} into {destination}"


def upload_pages(inputs: dict[str, str], workspace: Path, store: Path) -> str:
    """The site folder as the `github-pages` artifact (the action tars the folder; a missing one fails the step)."""
    folder = workspace / (inputs.get("path") or "_site")
    if not folder.is_dir():
        raise ActionFailed(f"tar: {inputs.get('path') or '_site'}: Cannot open: No such file or directory")
    shutil.copytree(folder, store / PAGES_ARTIFACT, dirs_exist_ok=False)
    return f"{PAGES_ARTIFACT} from {folder}"


def deploy_pages(inputs: dict[str, str], workspace: Path, store: Path) -> str:
    """Serves the `github-pages` artifact of this run; without one the action fails as GitHub's does."""
    if not (store / PAGES_ARTIFACT / "index.html").is_file():
        raise ActionFailed("No uploaded artifact was found! Please check if there are any errors at build step.")
    return f"deployed {PAGES_ARTIFACT}"


VERBS = {"upload": upload, "download": download, "upload-pages": upload_pages, "deploy-pages": deploy_pages}


def main(argv: list[str]) -> int:
    (verb,) = argv
    inputs = {k[len("INPUT_") :].lower().replace("_", "-"): v for k, v in os.environ.items() if k.startswith("INPUT_")}
    store = Path(os.environ["ARTIFACT_STORE"])
    store.mkdir(parents=True, exist_ok=True)
    try:
        print(VERBS[verb](inputs, Path.cwd(), store))
    except ActionFailed as failed:
        print(f"::error::{failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
