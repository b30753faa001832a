"""``blis-fast observe``: drive an OpenAI-compatible endpoint with a workload and record
what it saw (docs/observe.md).

    settings.py  ObserveSettings: the endpoint, model, time scale, concurrency, timeout
    prompts.py   the prompt token ids sent for each request (deterministic)
    stream.py    one request's body and its response: status, OpenAI errors, SSE chunks
    observer.py  the schedule (open and closed loop), the concurrency limit, Ctrl-C;
                 ``observe`` writes the recording (blis_fast.workload.formats.observed)
    summary.py   each request's outcome kind and the summary printed

httpx (the ``serve`` extra) is imported only when an observation runs.
"""

from blis_fast.observe.observer import ObserveResult, Observer, observe
from blis_fast.observe.settings import ObserveSettings
from blis_fast.observe.summary import notices, outcome, summarize

__all__ = ["ObserveResult", "ObserveSettings", "Observer", "observe", "notices", "outcome", "summarize"]
