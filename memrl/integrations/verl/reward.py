"""``compute_score`` for verl's ``reward.custom_reward_function``: memrl's rewards through verl's reward
manager.

    reward.custom_reward_function.path=pkg://memrl.integrations.verl.reward
    reward.custom_reward_function.name=compute_score

**Who calls it.** Not memrl's own loops: ``memagent``, ``memupdate`` and ``membuilder`` score their
episodes in process and set ``reward_score``, and verl's worker only asks its reward loop for outputs that
have none (``verl/experimental/agent_loop/agent_loop.py``, ``_compute_score``: ``if
final_output.reward_score is None and enable_async_reward``). It serves verl's stock loops
(``single_turn_agent``, ``tool_agent``) run on memrl ``read`` rows, and anyone scoring MemAgent answers
through verl's reward managers.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info, **reward_kwargs)`` with
the decoded response of an episode's last sequence. For ``read`` rows (MemAgent) that is the final
answer, scored by :func:`memrl.rewards.memagent.memagent_eval` (``score`` = MemAgent's 0/1 boxed match,
plus ``em``, ``f1``, ``sub_em``, ``has_boxed`` logged by verl). With
``reward.custom_reward_function.reward_kwargs.reward_server=http://host:8765`` (and ``reward_token``;
configs/verl/memrl_base.yaml declares both keys, so no ``+`` is needed) the same score is asked of memrl's
reward server (``memrl serve reward``, ``POST /v1/score`` with a ``memagent`` item) instead.

``update`` and ``build`` rows need the episode's memory store, which only memrl's agent loop has; if this
function is called for one (a stock loop was configured for memrl rows), it raises a clear error instead
of inventing a score. A failure is never turned into a reward: an unreachable server or a ``null`` score
raises.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from memrl.errors import DataError, ProviderError


def _golds(ground_truth: Any) -> list[str]:
    if isinstance(ground_truth, str):
        try:
            value = json.loads(ground_truth)
        except json.JSONDecodeError:
            value = [ground_truth]  # a plain answer string (rows not written by memrl)
    else:
        value = ground_truth
    return [str(g) for g in (value if isinstance(value, list | tuple) else [value])]


#: The longest text the reward server takes in one field (``memrl.server.reward_api``).
SERVER_TEXT_CHARS = 20_000


def scored_part(response: str | None) -> str:
    """The end of a response that MemAgent's score reads: from its last ``\\boxed{`` on (the score only
    looks at the last box, and at nothing before it), else its last 300 characters; at most
    :data:`SERVER_TEXT_CHARS`. A long reasoning trace then scores on the server exactly as it does in
    process, instead of being refused for its length."""
    text = response or ""
    start = text.rfind("\\boxed{")
    part = text[start:] if start >= 0 else text[-300:]
    return part[-SERVER_TEXT_CHARS:]


def score_remote(
    url: str, items: list[dict[str, Any]], token: str | None = None, timeout: float = 60.0
) -> list[dict]:
    """``POST {url}/v1/score`` on memrl's reward server; the results in order (each with ``score``)."""
    body = json.dumps({"items": items}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/v1/score", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            results = json.loads(resp.read())["results"]
    except urllib.error.HTTPError as e:
        raise ProviderError(f"reward server {url}: HTTP {e.code}: {e.read()[:300]!r}") from e
    except (urllib.error.URLError, OSError, KeyError, json.JSONDecodeError) as e:
        raise ProviderError(f"reward server {url}: {type(e).__name__}: {e}") from e
    for r in results:
        if r.get("score") is None:
            raise ProviderError(f"reward server {url} could not score an item: {r.get('error')}")
    return results


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    reward_server: str | None = None,
    reward_token: str | None = None,
    **_: Any,
) -> dict[str, float]:
    """memrl's score of one response (see the module docstring); a dict with ``score`` for verl."""
    info = extra_info or {}
    task = info.get("task") or str(data_source).rsplit("/", 1)[-1]
    if task != "read":
        raise DataError(
            f"memrl {task!r} rows ({data_source}) are scored by memrl's {task} agent loop, which sets the "
            "reward itself: use agent_name memupdate/membuilder (docs/verl.md)"
        )
    golds = _golds(ground_truth)
    if reward_server:
        item = {"metric": "memagent", "response": scored_part(solution_str), "answers": golds}
        result = score_remote(reward_server, [item], reward_token)[0]
        return {"score": float(result["score"]), **{k: float(v) for k, v in result.get("metrics", {}).items()
                                                    if isinstance(v, int | float)}}  # fmt: skip
    from memrl.rewards.memagent import memagent_eval

    scores = memagent_eval(solution_str, golds)
    return {"score": scores["reward"], **scores}
