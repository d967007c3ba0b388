"""A perf cell's numbers are one type with its JSON form: what a night writes reads back the same, and a cell of an
older release (before the reason, the fresh boot's value, A's night and the boots in turns were kept) reads too."""

from __future__ import annotations

import json

from pipeline.outcome import CellNumbers, cells_of
from pipeline.status import Status

# as the perf verdict writes them now: a cell within its reference, and one paired in turns after a fresh boot
WITHIN = {"status": "PASS", "value": 19.1, "ref": 18.3, "reason": "19.1 t/s vs 18.3 (the file's reference)"}
PAIRED = {
    "status": "FAIL",
    "value": 9.2,
    "ref": None,
    "reason": "tg32 (c1): 0.46x the last confirmed build over 2 boot pairs, FAIL",
    "rerun_value": 9.4,
    "gap": "the file's reference is another build's",
    "b_over_a": 0.4612,
    "pairs": 2,
    "last_good": "runtime-2026-11-20",
    "a_night": "2026-11-20",
    "in_turn": True,
}
# as a release of 2026-11-23 wrote them: no reason, no rerun, no A's night, pairs side by side, A unknown
OLDER = {"status": "INCONCLUSIVE", "value": 17.0, "ref": 20, "b_over_a": 0.97, "pairs": 8, "last_good": None}


def test_what_a_night_writes_reads_back_the_same_through_json() -> None:
    for written in (WITHIN, PAIRED):
        read = CellNumbers.from_json(json.loads(json.dumps(written)))
        assert read.to_json() == written


def test_the_deciding_value_is_the_fresh_measurement_where_there_is_one() -> None:
    assert CellNumbers.from_json(PAIRED).deciding == 9.4
    assert CellNumbers.from_json(WITHIN).deciding == 19.1


def test_an_older_releases_cell_reads_with_what_it_lacks_left_empty() -> None:
    older = CellNumbers.from_json(OLDER)
    assert older.status == Status.INCONCLUSIVE and older.deciding == 17.0 and older.ref == 20.0
    assert (older.reason, older.rerun_value, older.a_night, older.in_turn) == ("", None, None, False)
    assert (older.b_over_a, older.pairs, older.last_good) == (0.97, 8, None)


def test_shapes_no_release_wrote_are_not_numbers() -> None:
    odd = CellNumbers.from_json({"status": "MAYBE", "value": "fast", "ref": True, "pairs": "2", "in_turn": "yes"})
    assert (odd.status, odd.value, odd.ref, odd.pairs, odd.deciding) == (None, None, None, None, None)
    assert odd.in_turn is False
    numbers = {"cells": {"tg32 (c1)": WITHIN, "broken": "not a mapping"}, "stage_s": {}}
    assert list(cells_of(numbers)) == ["tg32 (c1)"] and cells_of({"cells": []}) == {} and cells_of({}) == {}
