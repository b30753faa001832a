"""The prompt token ids the observer sends for each request -- deterministic, so the same
spec and seed send the same prompts (docs/observe.md, "What it sends"):

- a trace's explicit ``prompt_token_ids`` are sent as they are;
- otherwise a session's first turn is its shared prefix's ids (``Requests.prefix_tokens``)
  followed by fresh ids, and a later turn is the previous turn's prompt, then ids standing
  for the previous turn's output, then fresh ids (the conversation's history, as the
  simulator's block keys model it -- so a server's prefix cache sees the same sharing);
- fresh ids come from the request's ``content_seed``: ``numpy.random.default_rng([seed
  mod 2^64, 0])`` draws the prompt's, ``[seed mod 2^64, 1]`` the output's stand-ins
  (a trace's explicit ``output_token_ids`` when it has them), uniform in [0, TOKEN_ID_BOUND).
"""

from __future__ import annotations

import numpy as np

from blis_fast.workload.distribution import MAX_TOKEN_ID
from blis_fast.workload.generate import Requests

TOKEN_ID_BOUND = MAX_TOKEN_ID  # the spec's prefix ids are drawn below it too
_UINT64 = (1 << 64) - 1


def _fresh(seed: int, stream: int, n: int) -> np.ndarray:
    if n <= 0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng([int(seed) & _UINT64, stream])
    return rng.integers(0, TOKEN_ID_BOUND, size=n, dtype=np.int64)


class PromptBuilder:
    """``prompt_ids(k)``: request k's prompt token ids.  A session's turns are built in
    order (a later turn extends the previous one); the sequence (prompt + output stand-ins)
    of a turn that has a next turn is kept only until that turn is built."""

    def __init__(self, requests: Requests):
        self.requests = requests
        self.parent = requests.parents()
        self.has_child = np.zeros(len(requests), bool)
        self.has_child[self.parent[self.parent >= 0]] = True
        self._sequences: dict[int, np.ndarray] = {}

    def _explicit(self, what: str, k: int) -> np.ndarray | None:
        ids = self.requests.token_ids
        if ids is None or what not in ids:
            return None
        off = ids[f"{what}_offsets"]
        return np.asarray(ids[what][off[k]:off[k + 1]], np.int64)

    def _output_ids(self, k: int) -> np.ndarray:
        explicit = self._explicit("output", k)
        if explicit is not None:
            return explicit
        return _fresh(self.requests["content_seed"][k], 1, int(self.requests["output_len"][k]))

    def _own_prompt(self, k: int, head: np.ndarray) -> np.ndarray:
        """Request k's prompt given the history it starts with (cut to its length)."""
        explicit = self._explicit("prompt", k)
        if explicit is not None:
            return explicit
        length = int(self.requests["prompt_len"][k])
        head = head[:length]
        return np.concatenate([head, _fresh(self.requests["content_seed"][k], 0, length - head.shape[0])])

    def _start(self, k: int) -> np.ndarray:
        """What a session's first turn starts with: its shared prefix's ids, or nothing."""
        pid = int(self.requests["prefix_id"][k])
        return np.asarray(self.requests.prefix_tokens[pid], np.int64) if pid >= 0 else np.zeros(0, np.int64)

    def prompt_ids(self, k: int) -> np.ndarray:
        """Request k's prompt ids (``prompt_len[k]`` of them); its sequence is kept for its
        next turn.  An earlier turn not built yet is rebuilt (a loop, not a recursion: a
        session may have many turns)."""
        chain = [k]
        while self.parent[chain[-1]] >= 0 and int(self.parent[chain[-1]]) not in self._sequences:
            chain.append(int(self.parent[chain[-1]]))
        top_parent = int(self.parent[chain[-1]])
        history = self._sequences.pop(top_parent) if top_parent >= 0 else self._start(chain[-1])
        for j in reversed(chain):
            prompt = self._own_prompt(j, history)
            if j != k:
                history = np.concatenate([prompt, self._output_ids(j)])
        if self.has_child[k]:
            self._sequences[k] = np.concatenate([prompt, self._output_ids(k)])
        return prompt
