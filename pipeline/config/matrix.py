"""The model matrix as frozen dataclasses: profiles, entries, launch, serve options, benchmark cells."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pipeline.config.cluster import Cluster
from pipeline.errors import UsageError

Accelerator = Literal["cuda", "cpu"]
LaunchTarget = Literal["local", "docker", "ray"]


@dataclass(frozen=True)
class TorchExpectation:
    """The torch build a profile's runtime must have (cuda None means a CPU build)."""

    version: str
    cuda: str | None = None
    index_url: str | None = None


@dataclass(frozen=True)
class MemoryRules:
    """How a host makes room before each boot: on unified memory (GB10) the GPU's memory is the host's, page cache
    included, and vLLM's start-up check counts only what is free."""

    unified: bool = False  # the GPU shares the host's memory: an entry needs gpu_memory_utilization x MemTotal
    drop_caches: bool = False  # drop the page cache before each boot (root, or sudo -n for /proc/sys/vm/drop_caches)
    wait_s: float = 60.0  # how long to wait for MemAvailable to reach the need (a stopped server returns it slowly)
    overhead_gib: float = 0.0  # a CPU engine's own memory beside its KV cache (weights, runtime)


@dataclass(frozen=True)
class PinnedBase:
    """A compiled wheel a profile's builds may overlay on: a release file pinned by sha256, and the git tree its
    natives were compiled from (so the night can place it in tonight's history)."""

    project: str
    version: str
    filename: str
    sha256: str
    tree: str


@dataclass(frozen=True)
class BootBudget:
    """The boots made in turns a night may spend (one server at a time). An entry's boot pairs stop at `entry` boots
    when they lean to no slowdown, and may go on to `suspected` while they lean to one; all entries of a night share
    `night`. At 3-5 minutes a Spark boot, 4 is about a quarter of an hour and 32 at most two and a half hours of a
    night; `entry` is where a night leaning clean is cleared (docs/verdict.md, "The operating point")."""

    entry: int = 4
    suspected: int = 16
    night: int = 32


@dataclass(frozen=True)
class Profile:
    """A hardware profile: where the matrix runs and what a healthy runtime looks like there."""

    name: str
    hardware: str
    accelerator: Accelerator
    torch: TorchExpectation
    candidate_from: Literal["build", "pip"]
    candidate_requirements: tuple[str, ...] = ()
    candidate_remove: tuple[str, ...] = ()
    candidate_base: str | None = None  # the interpreter whose torch the candidate is layered over (a path or command)
    arch: str | None = None
    platform: str | None = None  # "linux_aarch64": the wheels' platform
    glibc: str | None = None  # the host's glibc ("2.39"): manylinux_2_N wheels with N up to it install
    absent_by_design: Mapping[str, str] = field(default_factory=dict)  # library glob -> why it has no image here
    driver_min: str | None = None
    driver_below: str | None = None
    health: Mapping[str, float] = field(default_factory=dict)
    cluster: Cluster | None = None  # the runner's hosts for cluster entries (its cluster.yaml), when it has them
    listen: str = "127.0.0.1"  # where vLLM's API server binds
    base_image: str | None = None
    description: str = ""
    memory: MemoryRules = field(default_factory=MemoryRules)
    # How many servers of one entry fit the host at once. 1 (the Spark: every entry takes 0.80-0.87 of its memory):
    # another build (the last confirmed one, for pairs or as the golden judge) is served in turns with tonight's,
    # never beside it. 2: beside it.
    servers_at_once: int = 1
    # The judge of a night with no golden reference: "transformers" (the CPU profile's default, where the weights are
    # a folder here) or "last-confirmed" (the entry's last confirmed build, always on a GPU profile).
    golden_judge: Literal["transformers", "last-confirmed"] = "transformers"
    boot_budget: BootBudget = field(default_factory=BootBudget)
    # A built profile's sources (vllm, flashinfer) and the wheels they may overlay on when only Python changed
    build_sources: tuple[str, ...] = ("flashinfer", "vllm")
    native_bases: Mapping[str, PinnedBase] = field(default_factory=dict)
    entries_of: str | None = None  # serve the entries of another profile (the same host kind, built another way)

    @property
    def builds_natively(self) -> bool:
        """Whether tonight's natives can be compiled here: vLLM's builder targets a CUDA architecture."""
        return self.arch is not None

    def lacks_hosts_for(self, entry: ModelEntry) -> bool:
        """Whether the entry spans hosts this runner has none of (no cluster file): it is skipped, and nothing of it,
        its weights least of all (a cluster entry's model is the largest of the matrix), is fetched."""
        return entry.topology == "cluster" and self.cluster is None


@dataclass(frozen=True)
class Cell:
    """One benchmark cell, named exactly as llama-benchy names its rows."""

    name: str
    kind: Literal["pp", "tg"]
    pp: int
    tg: int
    depth: int
    concurrency: int


@dataclass(frozen=True)
class BenchSpec:
    """Prompt sizes, generation lengths, context depths and concurrencies to measure."""

    pp: tuple[int, ...]
    tg: tuple[int, ...]
    depth: tuple[int, ...] = (0,)
    concurrency: tuple[int, ...] = (1,)
    runs: int = 3

    def cases(self) -> list[tuple[Cell, Cell]]:
        """Every measured case as its (pp cell, tg cell), in llama-benchy's order: depth, pp, tg, concurrency."""
        show_concurrency = max(self.concurrency) > 1
        cases = []
        for depth in self.depth:
            for pp in self.pp:
                for tg in self.tg:
                    for conc in self.concurrency:
                        suffix = (f" @ d{depth}" if depth > 0 else "") + (f" (c{conc})" if show_concurrency else "")
                        cases.append(
                            (
                                Cell(f"pp{pp}{suffix}", "pp", pp, tg, depth, conc),
                                Cell(f"tg{tg}{suffix}", "tg", pp, tg, depth, conc),
                            )
                        )
        return cases

    def cells(self) -> list[Cell]:
        """Every cell, once: pp512 measured with tg32 and with tg128 is one pp cell (its first case judges it)."""
        unique: dict[str, Cell] = {}
        for pp_cell, tg_cell in self.cases():
            unique.setdefault(pp_cell.name, pp_cell)
            unique.setdefault(tg_cell.name, tg_cell)
        return list(unique.values())


@dataclass(frozen=True)
class Launch:
    """How the engine is started: target, entry point, image, boot deadline."""

    target: LaunchTarget
    entrypoint: Literal["cli", "module"] = "cli"
    image: str | None = None
    boot_timeout_s: int = 900


@dataclass(frozen=True)
class Weights:
    """Where the weights come from: a model hub cache, or a Python package (the CPU profile)."""

    source: Literal["hub", "package", "path"] = "hub"
    package: str | None = None
    file: str | None = None
    convert: str | None = None
    sha256: str | None = None
    path: str | None = None
    ignore: tuple[str, ...] = ()  # Hub files vLLM does not read (glob patterns): never downloaded or checked


@dataclass(frozen=True)
class ModelEntry:
    """One matrix entry: a model served one way on one profile, with its checks."""

    id: str
    model: str
    profile: str
    launch: Launch
    golden: str
    bench: BenchSpec
    serve: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    topology: Literal["solo", "cluster"] = "solo"
    nodes: int = 1
    revision: str | None = None
    weights: Weights = Weights()
    engine: str = "vllm"
    required: bool = True
    tags: tuple[str, ...] = ()
    modalities: tuple[str, ...] = ()  # inputs beside text the served model takes ("image"): the golden stage asks
    kernels: Mapping[str, str | tuple[str, ...]] = field(default_factory=dict)  # component -> the kernel(s) it runs
    identity: Mapping[str, Any] = field(default_factory=dict)  # config.json keys and values
    identity_files: Mapping[str, str] = field(default_factory=dict)  # file name -> sha256
    description: str = ""
    index: int = 0

    @property
    def served_model_name(self) -> str:
        """The id the server must report on /v1/models."""
        return str(self.serve.get("served_model_name", self.model))

    @property
    def dtype(self) -> str:
        return str(self.serve.get("dtype", "auto"))

    @property
    def split(self) -> str:
        """How the model is split over its GPUs, as a night's summary says it ("pipeline parallel 2")."""
        sizes = {kind: int(self.serve.get(f"{kind}_parallel_size", 1)) for kind in ("tensor", "pipeline")}
        return " x ".join(f"{kind} parallel {size}" for kind, size in sizes.items() if size > 1) or "not split"


@dataclass(frozen=True)
class Matrix:
    """The whole models.yaml."""

    profiles: Mapping[str, Profile]
    entries: tuple[ModelEntry, ...]

    def entry(self, entry_id: str) -> ModelEntry:
        for entry in self.entries:
            if entry.id == entry_id:
                return entry
        raise KeyError(entry_id)

    def for_profile(self, profile: str) -> tuple[ModelEntry, ...]:
        known = self.profiles.get(profile)
        serves = known.entries_of if known is not None and known.entries_of else profile
        return tuple(e for e in self.entries if e.profile == serves)

    def select(self, profile: str, only: Sequence[str] = ()) -> tuple[ModelEntry, ...]:
        """The profile's entries, or just those named by `--only`; a name the profile lacks is a usage error."""
        entries = self.for_profile(profile)
        if unknown := sorted(set(only) - {e.id for e in entries}):
            raise UsageError(f"--only {', '.join(unknown)}: not an entry of profile {profile}")
        return tuple(e for e in entries if not only or e.id in only)


def _profile(name: str, raw: Mapping[str, Any]) -> Profile:
    torch = raw["torch"]
    candidate = raw["candidate"]
    driver = raw.get("driver", {})
    return Profile(
        name=name,
        hardware=raw["hardware"],
        accelerator=raw["accelerator"],
        torch=TorchExpectation(torch["version"], torch.get("cuda"), torch.get("index_url")),
        candidate_from=candidate["from"],
        candidate_requirements=tuple(candidate.get("requirements", ())),
        candidate_remove=tuple(candidate.get("remove", ())),
        candidate_base=candidate.get("base"),
        arch=raw.get("arch"),
        platform=raw.get("platform"),
        glibc=raw.get("glibc"),
        absent_by_design=MappingProxyType(dict(raw.get("absent_by_design", {}))),
        driver_min=driver.get("min"),
        driver_below=driver.get("below"),
        health=MappingProxyType(dict(raw.get("health", {}))),
        listen=raw.get("listen", "127.0.0.1"),
        base_image=raw.get("base_image"),
        description=raw.get("description", ""),
        memory=MemoryRules(**raw.get("memory", {})),
        servers_at_once=raw.get("servers_at_once", 1),
        golden_judge=raw.get("golden_judge", "transformers"),
        boot_budget=BootBudget(**raw.get("boot_budget", {})),
        build_sources=tuple(candidate.get("sources", ("flashinfer", "vllm"))),
        native_bases=MappingProxyType(
            {family: PinnedBase(**pin) for family, pin in raw.get("native_base", {}).items()}
        ),
        entries_of=raw.get("entries_of"),
    )


def _entry(index: int, raw: Mapping[str, Any]) -> ModelEntry:
    launch, bench, topology = raw["launch"], raw["bench"], raw.get("topology", {"mode": "solo"})
    weights = raw.get("weights", {"from": "hub"})
    mode = topology["mode"]
    return ModelEntry(
        id=raw["id"],
        model=raw["model"],
        profile=raw["profile"],
        launch=Launch(
            launch["target"], launch.get("entrypoint", "cli"), launch.get("image"), launch.get("boot_timeout_s", 900)
        ),
        golden=raw["golden"],
        bench=BenchSpec(
            tuple(bench["pp"]),
            tuple(bench["tg"]),
            tuple(bench.get("depth", (0,))),
            tuple(bench.get("concurrency", (1,))),
            bench.get("runs", 3),
        ),
        serve=MappingProxyType(dict(raw.get("serve", {}))),
        env=MappingProxyType({k: str(v) for k, v in raw.get("env", {}).items()}),
        topology=mode,
        nodes=topology.get("nodes", 2 if mode == "cluster" else 1),
        revision=raw.get("revision"),
        weights=Weights(
            weights["from"],
            weights.get("package"),
            weights.get("file"),
            weights.get("convert"),
            weights.get("sha256"),
            weights.get("path"),
            tuple(weights.get("ignore", ())),
        ),
        engine=raw.get("engine", "vllm"),
        required=raw.get("required", True),
        tags=tuple(raw.get("tags", ())),
        modalities=tuple(raw.get("modalities", ())),
        kernels=MappingProxyType(
            {key: value if isinstance(value, str) else tuple(value) for key, value in raw.get("kernels", {}).items()}
        ),
        identity=MappingProxyType(dict(raw.get("identity", {}).get("config", {}))),
        identity_files=MappingProxyType(dict(raw.get("identity", {}).get("files", {}))),
        description=raw.get("description", ""),
        index=index,
    )


def build_matrix(data: Mapping[str, Any]) -> Matrix:
    """A Matrix from schema-valid models.yaml data."""
    profiles = {name: _profile(name, raw) for name, raw in data["profiles"].items()}
    entries = tuple(_entry(i, raw) for i, raw in enumerate(data["models"]))
    return Matrix(MappingProxyType(profiles), entries)
