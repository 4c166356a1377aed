"""The candidate a near-tie ranked below the pick though its own prediction is faster, and the seeds' preference that
decided it (ranking.preference): on H100 a DeepEP candidate whose buffers leave under moves.TIGHT_SHARE of the GPU
free ranks below the HybridEP one that leaves more, and plan says so beside its pick rather than leave the user to
wonder why the platform's default dispatcher lost."""

from dataclasses import dataclass

from moetune.planner.estimate import Estimate
from moetune.planner.moves import tight
from moetune.planner.ranking import PREFERENCES, SMALLEST_GAIN, preference, within
from moetune.planner.resplit import resplit_one

# The least predicted gain over the pick that plan explains: the least moetune names as a gain anywhere (below it a
# candidate differs in the step model's rounding, not a wall); plan's general note on the seeds' order covers the rest
NEAR_TIE_NOTE_GAIN = SMALLEST_GAIN


@dataclass(frozen=True, slots=True)
class NearTie:
    """A candidate predicting `gain` over the pick that the seeds' order ranked below it, the first of
    ranking.PREFERENCES on which the two differ, and its row on plan's list (None where it is not shown)."""
    alternative: Estimate
    gain: float
    preference: str
    row: int | None


def near_tie(s, results: list[Estimate], result, fastest: float, efficiency_overrides: dict | None) -> NearTie | None:
    """The fastest candidate of the search's ranked list (`s.best`, planner/search.py) whose ranked step beats the
    pick's yet stands below it, as a row would show it (`result`, at its own best split), where its prediction beats
    the pick's by NEAR_TIE_NOTE_GAIN and it fits the search's budget; None where the pick is the fastest, or where the
    seeds' order does not explain it: the two in other 1% bands, or alike in every preference (resplit_shown keeps
    the pick the pick, where ranking.rank_key would put the faster of two alike candidates first)."""
    if not results or len(s.best) < 2:
        return None
    ahead = [(b[0], i) for i, b in enumerate(s.best[1:], 1) if b[0] < s.best[0][0]]
    if not ahead:
        return None
    i = min(ahead)[1]
    # the band each stands in is the search's sort's (search._plan_once `fastest`, taken before the rows shown were
    # re-split), so the note and the order read one band
    if within(s.best[i][0], fastest) != within(s.best[0][0], fastest):
        return None
    pick, alt = results[0], results[i] if i < len(results) else _off_the_list(s, s.best[i], result,
                                                                              efficiency_overrides)
    gain = alt.time["tokens_per_s_per_gpu"] / pick.time["tokens_per_s_per_gpu"] - 1
    if gain < NEAR_TIE_NOTE_GAIN or not alt.fits_on(s.gpu):
        return None
    first, second = (preference(e.layout, e.knobs, s.dispatcher(e.layout), s.wl.seq_length, tight(e))
                     for e in (pick, alt))
    decided = next((n for n, a, b in zip(PREFERENCES, first, second) if a != b), None)
    if decided is None or first > second:
        return None
    return NearTie(alternative=alt, gain=gain, preference=decided, row=i + 1 if i < len(results) else None)


def _off_the_list(s, entry: tuple, result, efficiency_overrides: dict | None) -> Estimate:
    """A ranked candidate below the rows shown, as a row would show it: at its own best split, as the pick is (a row
    shown is one already: resplit_shown)."""
    _, _, lay, mbs, knobs, reach = entry
    if s.resplit and lay.pp > 1 and reach is not None:  # not re-split yet
        lay = resplit_one(s, lay, mbs, knobs, efficiency_overrides)
    return result(lay, mbs, knobs)
