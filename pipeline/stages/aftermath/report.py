"""Reports of a run: run.json (versioned), summary.md (also to $GITHUB_STEP_SUMMARY) and junit.xml."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from pipeline.infra import actions
from pipeline.infra.files import write_atomically
from pipeline.outcome import Outcome, cells_of
from pipeline.places import RunDir
from pipeline.status import Status

RUN_VERSION = 1


def write_reports(folder: RunDir, run: Mapping[str, Any], outcomes: Sequence[Outcome]) -> dict[str, Path]:
    """Every report of the run, written atomically; returns where each went."""
    paths = {"run.json": folder.run_json, "summary.md": folder.summary, "junit.xml": folder.junit}
    document = {"version": RUN_VERSION, **run, "entries": [o.to_json() for o in outcomes]}
    write_atomically(paths["run.json"], json.dumps(document, indent=2, sort_keys=True, default=str) + "\n")
    summary = render_summary(run, outcomes)
    write_atomically(paths["summary.md"], summary)
    actions.append_summary(summary)  # on Actions, the run's page shows it under the step
    write_atomically(paths["junit.xml"], render_junit(run, outcomes))
    return paths


def render_summary(run: Mapping[str, Any], outcomes: Sequence[Outcome]) -> str:
    lines = [
        f"# spark-nightly {run['night']}: {run['verdict']}",
        "",
        f"Run `{run['run_id']}` on profile `{run['profile']}`; {run.get('publish') or 'nothing published'}.",
        "",
        "| entry | status | stage | reason | duration |",
        "| --- | --- | --- | --- | --- |",
    ]
    for outcome in outcomes:
        required = "" if outcome.required else " (optional)"
        reason = outcome.reason.replace("|", "\\|").replace("\n", " ")
        status, took = outcome.status.value, f"{outcome.duration_s:.0f} s"
        lines.append(f"| {outcome.entry}{required} | {status} | {outcome.stage} | {reason} | {took} |")
    lines += _build_section(run)
    lines += _gap_section(outcomes)
    lines += _boots_section(outcomes)
    lines += _cluster_section(outcomes)
    if run.get("suspects"):
        lines += ["", f"Suspect change: {run['suspects']}"]
    if culprits := run.get("culprits"):
        lines += _culprit_section(culprits)
    if bisection := run.get("bisection"):
        lines += _bisection_section(bisection)
    return "\n".join(lines) + "\n"


def _bisection_section(bisection: Mapping[str, Any]) -> list[str]:
    """main's commits since the last good night, halved: the first bad commit (or the range) and every step."""
    bad = bisection.get("first_bad")
    if bad:
        pr = f", PR #{bisection['first_bad_pr']}" if bisection.get("first_bad_pr") else ""
        found = f"first bad commit: {bad['sha'][:12]} {bad['subject']} ({bad['date'][:10]}{pr})"
    elif bisection.get("good_fails"):
        found = f"not main's history: the last good commit {bisection['good'][:12]} fails tonight too"
    elif bisection.get("candidates"):
        found = f"the first bad commit is one of {', '.join(sha[:12] for sha in bisection['candidates'])}"
    else:
        found = f"broke between {bisection['last_good'][:12]} and {bisection['last_bad'][:12]}"
    held = f" ({bisection['held']})" if bisection.get("held") else ""
    lines = [
        "",
        f"## Bisection of {bisection['source']} main{held}",
        "",
        *[f"- chosen by: {line}" for line in bisection.get("separated_by") or ()],
        *([""] if bisection.get("separated_by") else []),
        f"{found}: {bisection['why']}.",
        "",
        "| step | commit | built | time | verdict | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, step in enumerate(bisection["steps"], 1):
        subject = f"{step['commit'][:12]} {step['subject']}".replace("|", "\\|")
        detail = str(step["detail"]).replace("|", "\\|").replace("\n", " ")
        built = str(step["build"] or "-").replace("|", "\\|")
        verdict = f"{step['verdict']}, second look" if step.get("again") else step["verdict"]
        lines.append(f"| {number} | {subject} | {built} | {step['seconds']:.0f} s | {verdict} | {detail} |")
    return lines


def _build_section(run: Mapping[str, Any]) -> list[str]:
    """Tonight's build, a line a source (overlay or native, and why), then what the wheels' inspection noted (the
    night's publish.inspection_summary)."""
    inspection = run.get("inspection") or {}
    if not inspection.get("builds"):
        return []
    lines = ["", "## Tonight's build", ""]
    lines += [f"- {b['family']}: {b['kind']}" + (f": {b['why']}" if b["why"] else "") for b in inspection["builds"]]
    lines += [f"- note: {note}" for note in inspection.get("notes", [])]
    return lines


def _gap_section(outcomes: Sequence[Outcome]) -> list[str]:
    """Cells off a reference measured elsewhere (another build, or a host this one is slower than), on a host's first
    night of the cell."""
    gaps = [
        f"- {outcome.entry} {cell}: {numbers.gap}"
        for outcome in outcomes
        for cell, numbers in cells_of(outcome.numbers).items()
        if numbers.gap
    ]
    if not gaps:
        return []
    title = "## Gaps to references measured elsewhere: another build or host (reported, not blamed on tonight's wheels)"
    return ["", title, "", *gaps]


def _boots_section(outcomes: Sequence[Outcome]) -> list[str]:
    """The boots made in turns (another build served in tonight's place: boot pairs, the golden judge) and their time:
    on a host that holds one server, what a tripped cell cost the night."""
    made = [(o.entry, o.numbers["turns"]) for o in outcomes if isinstance(o.numbers.get("turns"), Mapping)]
    if not made:
        return []
    boots = sum(int(turns.get("boots", 0)) for _, turns in made)
    seconds = sum(float(turns.get("boot_s", 0.0)) for _, turns in made)
    each = "; ".join(
        f"{entry} {turns.get('boots', 0)} ({float(turns.get('boot_s', 0.0)):.0f} s)" for entry, turns in made
    )
    return ["", f"Boots in turns: {boots}, {seconds:.0f} s booting ({each})."]


def _cluster_section(outcomes: Sequence[Outcome]) -> list[str]:
    """Each entry served across hosts: its split, its hosts, and its boot (the hosts up, then the server ready)."""
    lines = []
    for outcome in outcomes:
        shape = outcome.numbers.get("cluster")
        if not isinstance(shape, Mapping):
            continue
        hosts = ", ".join(shape.get("hosts", ()))
        up = f"hosts up in {shape['ready_s']:.0f} s" if "ready_s" in shape else "the hosts did not come up"
        server = outcome.numbers.get("boot_s")
        served = f", the server ready {server:.0f} s after" if server is not None else ""
        lines.append(f"- {outcome.entry}: {shape['split']} over {hosts}; {up}{served}")
    return ["", "## Served across hosts", "", *lines] if lines else []


def _culprit_section(culprits: Mapping[str, Any]) -> list[str]:
    lines = [
        "",
        "## Culprit search",
        "",
        f"{culprits['conclusion']}: {culprits['why']} ({len(culprits['trials'])} of at most "
        f"{culprits['max_builds']} extra builds).",
        "",
        "| trial | main plus | built | time | verdict | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, trial in enumerate(culprits["trials"], 1):
        subset = ", ".join(trial["subset"]) or "(main alone)"
        detail = str(trial["detail"]).replace("|", "\\|").replace("\n", " ")
        built = str(trial.get("build") or "-").replace("|", "\\|")
        took = f"{trial['seconds']:.0f} s" if trial.get("seconds") else "-"  # records before 2026-11-27 have none
        lines.append(f"| {number} | {subset} | {built} | {took} | {trial['verdict']} | {detail} |")
    return lines


def render_junit(run: Mapping[str, Any], outcomes: Sequence[Outcome]) -> str:
    failures = sum(o.status == Status.FAIL for o in outcomes)
    errors = sum(o.status in {Status.ABORTED, Status.INCONCLUSIVE} for o in outcomes)
    skipped = sum(o.status in {Status.SKIPPED, Status.XFAIL} for o in outcomes)
    suite = ElementTree.Element(
        "testsuite",
        name=f"spark-nightly {run['night']}",
        tests=str(len(outcomes)),
        failures=str(failures),
        errors=str(errors),
        skipped=str(skipped),
        time=f"{sum(o.duration_s for o in outcomes):.1f}",
    )
    for outcome in outcomes:
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=f"spark-nightly.{run['profile']}",
            name=outcome.entry,
            time=f"{outcome.duration_s:.1f}",
        )
        message = f"{outcome.stage}: {outcome.reason}"
        if outcome.status == Status.FAIL:
            ElementTree.SubElement(case, "failure", message=message, type=outcome.stage).text = message
        elif outcome.status in {Status.ABORTED, Status.INCONCLUSIVE}:
            ElementTree.SubElement(case, "error", message=message, type=outcome.status.value).text = message
        elif outcome.status in {Status.SKIPPED, Status.XFAIL}:
            ElementTree.SubElement(case, "skipped", message=message)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
