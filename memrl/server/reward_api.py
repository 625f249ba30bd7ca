"""The reward server (``memrl serve reward``): memrl's own reward and metric functions over HTTP, in batches.

MemBuilder's design: rewards that need an LLM judge are computed by a separate server that RL workers
call, so the trainer's GPUs never wait on a judge model. Here it scores with the same functions memrl's
trainers and evaluations use (:mod:`memrl.scoring.metrics`, :mod:`memrl.rewards`, :mod:`memrl.scoring.judge`).

    memrl serve reward --port 8765 --token verl=SECRET123 --judge-provider openai --judge-model gpt-4o-mini

    POST /v1/score   Authorization: Bearer SECRET123
    {"items": [
      {"metric": "locomo_f1", "prediction": "in May 2023", "answer": "May 2023", "category": 2},
      {"metric": "memagent", "response": "... \\\\boxed{Paris}", "answers": ["Paris"]},
      {"metric": "answer_f1", "prediction": "Paris, Rome", "answers": ["Paris"], "category": 1},
      {"metric": "sub_em", "prediction": "in Paris", "answers": ["Paris"]},
      {"metric": "memupdate", "answer": "Lisbon", "retrieved_old": ["..."], "retrieved_new": ["..."],
       "old_texts": ["..."], "new_texts": ["..."]},
      {"metric": "judge", "question": "Where does Alice live?", "answer": "Lisbon", "prediction": "Lisbon"}
    ]}
    -> {"results": [{"score": 1.0, "metrics": {...}, "error": null}, ...], "n": 5, "failed": 0}

Training rewards (``answer_f1``, ``sub_em``, ``exact_match``, ``memagent``, ``memupdate``, ``judge``) are the
ones a policy cannot raise with a list of guesses or a fragment (:mod:`memrl.rewards.answer`; red-teamed by
``bench/reward_hacks.py``). ``locomo_f1``, ``token_f1``, ``sub_em_official`` and ``bleu1`` are the official
report metrics: ``locomo_f1`` pays comma-joined guesses on multi-hop questions and ``sub_em_official`` a
one-letter fragment of the gold, so do not train on them.

Results come back in request order. An item whose score cannot be computed (a judge that failed or
answered something unparsable) has ``"score": null`` and an ``error``: a failure is never a reward.
A malformed request (unknown metric, missing or mistyped field, too many items, a ``judge`` item when no
judge is configured) is refused whole with a 4xx JSON error and nothing is scored. ``GET /health`` says
which metrics and judge are available.
"""

import asyncio
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from memrl.rewards.answer import answer_reward
from memrl.rewards.memagent import memagent_eval
from memrl.rewards.memupdate import Probe as MemUpdateProbe
from memrl.rewards.memupdate import score_memupdate
from memrl.scoring import metrics as M
from memrl.scoring.judge import judge_answer
from memrl.server.http import (
    HTTPError,
    Limits,
    LimitsMiddleware,
    Principal,
    Tokens,
    bearer_dependency,
    install_error_handlers,
    json_response_class,
)

Text = Annotated[str, Field(max_length=20_000)]


def _category(value: int | str) -> int | str:
    """A LoCoMo category the metrics know (an id 1-5, a digit string or a name): anything else is a 422 naming
    the field, not a 500 from inside the metric."""
    try:
        M.locomo_category(value)
    except ValueError as e:
        raise ValueError(str(e)) from None
    return value


#: A LoCoMo category: 1-5 or a name such as "multi-hop" (:func:`memrl.scoring.metrics.locomo_category`).
Category = Annotated[
    Annotated[int, Field(ge=1, le=5)] | Annotated[str, Field(max_length=100)], AfterValidator(_category)
]
Texts = Annotated[list[Text], Field(max_length=1000)]
Golds = Annotated[list[Text], Field(min_length=1, max_length=100)]


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LocomoF1(_Item):
    """LoCoMo's official F1 with its category rules (multi-hop split on commas, adversarial = refusal)."""

    metric: Literal["locomo_f1"]
    prediction: Text
    answer: Text
    category: Category


class SquadMetric(_Item):
    """SQuAD-normalised token F1, exact match, BLEU-1 or MemAgent's official sub-EM (``sub_em_official``:
    a report metric, it pays a one-letter fragment of the gold), best over the gold answers."""

    metric: Literal["token_f1", "exact_match", "sub_em_official", "bleu1"]
    prediction: Text
    answers: Golds


class AnswerReward(_Item):
    """A training reward of :mod:`memrl.rewards.answer`: ``answer_f1`` (LoCoMo's F1 with every list part
    past the gold's count charged; give the LoCoMo ``category`` for its rules), ``sub_em`` (one short answer holding a whole
    gold answer), best over the gold answers."""

    metric: Literal["answer_f1", "sub_em"]
    prediction: Text
    answers: Golds
    category: Category | None = None


class MemAgent(_Item):
    """MemAgent's reward: 1 if the last \\boxed{} in the final 300 characters matches a gold answer."""

    metric: Literal["memagent"]
    response: Text
    answers: Golds


class Probe(BaseModel):
    """Another question of the conversation and what a search for it retrieves before and after."""

    model_config = ConfigDict(extra="forbid")
    answer: Text
    question: Text | None = None
    retrieved_old: Texts
    retrieved_new: Texts


class MemUpdate(_Item):
    """MemUpdate's reward (:func:`memrl.rewards.memupdate.score_memupdate`) from the memories retrieved
    for the question before/after (as a reader sees them, best first), all memory texts before/after,
    the question (its tokens are not the answer's to cover) and probe questions (the collateral loss)."""

    metric: Literal["memupdate"]
    answer: Text
    question: Text | None = None
    retrieved_old: Texts
    retrieved_new: Texts
    old_texts: Texts
    new_texts: Texts
    probes: Annotated[list[Probe], Field(max_length=64)] = []


class Judge(_Item):
    """An LLM judge's verdict (1 = CORRECT, 0 = WRONG) through the server's configured back-end."""

    metric: Literal["judge"]
    question: Text
    answer: Text
    prediction: Text
    category: Annotated[str, Field(max_length=100)] | None = None


ScoreItem = Annotated[
    LocomoF1 | SquadMetric | AnswerReward | MemAgent | MemUpdate | Judge, Field(discriminator="metric")
]
METRICS = ("answer_f1", "sub_em", "exact_match", "memagent", "memupdate", "judge",
           "locomo_f1", "token_f1", "sub_em_official", "bleu1")  # fmt: skip
_SQUAD = {"token_f1": M.token_f1, "exact_match": M.exact_match, "sub_em_official": M.sub_em, "bleu1": M.bleu1}


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: Annotated[list[ScoreItem], Field(min_length=1)]


class ScoreResult(BaseModel):
    score: float | None = Field(description="the reward; null when it could not be computed (see error)")
    metrics: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class ScoreResponse(BaseModel):
    results: list[ScoreResult]
    n: int
    failed: int


def score_pure(item: Any) -> ScoreResult:
    """Score one item that needs no LLM."""
    if isinstance(item, LocomoF1):
        return ScoreResult(score=M.locomo_f1(item.prediction, item.answer, item.category))
    if isinstance(item, SquadMetric):
        return ScoreResult(score=M.best_over_golds(_SQUAD[item.metric], item.prediction, item.answers))
    if isinstance(item, AnswerReward):
        kind = "f1" if item.metric == "answer_f1" else "sub_em"
        try:
            return ScoreResult(score=answer_reward(kind, item.prediction, item.answers, item.category))
        except ValueError as e:  # an unknown category name
            return ScoreResult(score=None, error=str(e))
    if isinstance(item, MemAgent):
        ev = memagent_eval(item.response, item.answers)
        return ScoreResult(score=ev["reward"], metrics=ev)
    if isinstance(item, MemUpdate):
        probes = [MemUpdateProbe(p.answer, p.question, p.retrieved_old, p.retrieved_new) for p in item.probes]
        out = score_memupdate(item.answer, item.retrieved_old, item.retrieved_new, item.old_texts,
                              item.new_texts, question=item.question, probes=probes)  # fmt: skip
        if out.value is None:
            return ScoreResult(score=None, error=out.failure)
        return ScoreResult(score=out.value, metrics=dict(out.metrics))
    raise TypeError(type(item).__name__)


def create_reward_app(
    tokens: Tokens | None = None,
    limits: Limits | None = None,
    *,
    judge: Any = None,
    max_batch: int = 256,
    judge_concurrency: int = 8,
    policy: Any = None,
) -> Any:
    """The reward server as an ASGI app (``judge``: a memrl LLM for the ``judge`` metric, or None), behind
    the browser guard (:mod:`memrl.server.guard`, ``policy``: a loopback server's by default): a web page
    must not spend the judge's LLM calls through the visitor's browser."""
    from memrl import __version__

    tokens = tokens or Tokens()
    auth = bearer_dependency(tokens)
    # The metrics load NLTK's stemmer on first use (seconds): do it now, not inside the first requests
    # (which would all wait behind it: that was the 1.6 s p99 of the first load test).
    M.locomo_f1("warm up", "warm up", 1)
    app = FastAPI(title="memrl reward server", version=__version__, docs_url=None, redoc_url=None,
                  default_response_class=json_response_class())  # fmt: skip
    install_error_handlers(app)
    judge_slots = asyncio.Semaphore(judge_concurrency)

    @app.get("/health", tags=["service"])
    async def health() -> dict[str, Any]:
        return {"status": "ok", "metrics": list(METRICS), "judge": getattr(judge, "name", None),
                "max_batch": max_batch, "auth": tokens.enabled}  # fmt: skip

    async def judged(item: Judge) -> ScoreResult:
        async with judge_slots:
            j = await judge_answer(
                judge, item.question, item.answer, item.prediction, question_type=item.category
            )
        if j.label is None:
            return ScoreResult(score=None, error=j.error or "the judge gave no verdict")
        return ScoreResult(
            score=1.0 if j.label else 0.0, metrics={"reasoning": j.reasoning, "cached": j.cached}
        )

    @app.post("/v1/score", response_model=ScoreResponse, tags=["rewards"])
    async def score(req: ScoreRequest, who: Principal = Depends(auth)) -> ScoreResponse:
        """Score a batch of items with memrl's reward and metric functions; results in request order."""
        if len(req.items) > max_batch:
            raise HTTPError(413, f"{len(req.items)} items in one request; the limit is {max_batch}: split the batch",
                            "too_large")  # fmt: skip
        judged_items = [i for i, it in enumerate(req.items) if isinstance(it, Judge)]
        if judged_items and judge is None:
            raise HTTPError(422, f"items[{judged_items[0]}] asks for metric 'judge' but this server has no judge: "
                            "start it with --judge-provider (and --judge-model)")  # fmt: skip
        results: list[ScoreResult | None] = [None] * len(req.items)
        for i, it in enumerate(req.items):
            if not isinstance(it, Judge):
                results[i] = score_pure(it)
        verdicts = await asyncio.gather(*(judged(req.items[i]) for i in judged_items))
        for i, v in zip(judged_items, verdicts, strict=True):
            results[i] = v
        done = [r for r in results if r is not None]
        return ScoreResponse(results=done, n=len(done), failed=sum(r.score is None for r in done))

    from memrl.server.guard import BrowserGuard, Policy

    return LimitsMiddleware(BrowserGuard(app, policy or Policy.for_server("127.0.0.1")), limits or Limits())
