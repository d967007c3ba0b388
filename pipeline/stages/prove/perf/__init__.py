"""The perf verdict: an entry's cells measured (llama-benchy's way), held to the host's own yardstick and screen, and
where one trips, paired with the last confirmed build (side by side, or boots in turns where one server fits), then
the entry's verdict and the books it writes. The rest of the gate enters only here, through the stage and the
verdict below; what the package keeps inside is one concern a module:

    measure.py    a case measured on a server: runs, requests, tokens/s
    gate.py       a cell against its reference's levels
    judge.py      a cell decided: the ordered table of rules, the yardstick, the books (history, A, pairs)
    paired.py     pairs against the last confirmed build, and what they decide
    pairs.py      side-by-side pairs of runs
    turns.py      boots in turns, where the host holds one server
    turn_plan.py  what boots in turns will cost, said before they start
    run.py        the stage: measure every case, judge every cell
    verdict.py    the entry's verdict, its one-line reason and its alerts
"""

from pipeline.stages.prove.perf.judge import PerfContext
from pipeline.stages.prove.perf.measure import CaseResult
from pipeline.stages.prove.perf.paired import CellOutcome
from pipeline.stages.prove.perf.run import JudgedPerf, measure_and_judge
from pipeline.stages.prove.perf.turn_plan import render_turns
from pipeline.stages.prove.perf.turns import Turns
from pipeline.stages.prove.perf.verdict import PerfVerdict, perf_verdict

__all__ = [
    "CaseResult",
    "CellOutcome",
    "JudgedPerf",
    "PerfContext",
    "PerfVerdict",
    "Turns",
    "measure_and_judge",
    "perf_verdict",
    "render_turns",
]
