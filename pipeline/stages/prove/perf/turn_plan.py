"""The boots a tripped cell costs on a host that holds one server, rendered for a dry run before any runs.

The order is the one pairs.boots_in_turn makes: tonight's boot (the bench), then boot pairs of the last confirmed
build (A) and tonight's (B), A B then B A..., every boot new, one pair at a time from MIN_BOOT_PAIRS until the
sequential test decides, up to MAX_BOOT_PAIRS or the boot budget. A real night picks each boot's port when it
boots; the dry run numbers them in order, so each boot's container, owner and log names are shown as distinct as
they will be.
"""

from __future__ import annotations

from pathlib import Path

from pipeline.config.matrix import ModelEntry
from pipeline.config.thresholds import MAX_BOOT_PAIRS, MIN_BOOT_PAIRS
from pipeline.stages.prove.boot import Candidate, plan_launch
from pipeline.stages.prove.perf.pairs import RUNS_PER_BOOT, WARMUP_RUNS, pair_order


def boot_order(boot_pairs: int) -> list[tuple[str, int]]:
    """(who, boot pair) of every boot in turns for `boot_pairs` pairs: "A" or "B", pair numbers from 1."""
    order: list[tuple[str, int]] = []
    for index in range(boot_pairs):
        sides = ("A", "B") if pair_order(index) else ("B", "A")
        order += [(side, index + 1) for side in sides]
    return order


def render_turns(
    entry: ModelEntry,
    tonight: Candidate,
    last_confirmed: Candidate,
    *,
    names: tuple[str, str],
    model_ref: str,
    cache_dir: Path,
    first_port: int = 8000,
) -> str:
    """Every boot of a cell that trips twice and goes to pairs in turns, each boot's launch rendered in full."""
    profile = tonight.profile
    tonight_name, last_name = names
    most_pairs = min(MAX_BOOT_PAIRS, profile.boot_budget.suspected // 2)
    lines = [
        f"# {entry.id} on profile {profile.name}: {profile.servers_at_once} server at a time, so a cell that trips "
        f"is paired in turns: {MIN_BOOT_PAIRS} boot pair{'s' if MIN_BOOT_PAIRS != 1 else ''}, then one more at a time "
        "until the sequential test "
        f"decides (at most {most_pairs}: {profile.boot_budget.entry} boots when they lean to no slowdown, "
        f"{profile.boot_budget.suspected} while they lean to one); each boot "
        f"{WARMUP_RUNS} warm-up runs and "
        f"{RUNS_PER_BOOT} measured",
        f"# A: {last_name}",
        f"# B: {tonight_name}",
        "# ports are picked free at each boot; numbered in order here. Before each boot the memory stage makes room "
        f"({'drop the page cache, ' if profile.memory.drop_caches else ''}wait for the entry's need).",
    ]
    boots = [("B", 0), *boot_order(most_pairs)]
    for number, (side, pair) in enumerate(boots, 1):
        port = first_port + number - 1
        candidate = tonight if side == "B" else last_confirmed
        plan = plan_launch(entry, candidate, model_ref=model_ref, port=port, cache_dir=cache_dir)
        why = "tonight's bench" if pair == 0 else f"boot pair {pair}"
        if pair > MIN_BOOT_PAIRS:
            why += " (only if the pairs before have not decided)"
        lines += ["", f"## boot {number}: {side}, {why}; stops before the next boot", plan.render()]
    fewest, most = 1 + 2 * MIN_BOOT_PAIRS, 1 + 2 * most_pairs
    lines += [
        "",
        f"# cost of the tripped cell: {fewest} to {most} boots x this entry's boot time, plus "
        f"{WARMUP_RUNS + RUNS_PER_BOOT} runs a boot; tonight's build is booted once more after the pairs if a later "
        "cell needs it",
    ]
    return "\n".join(lines)
