"""The reward server over real HTTP on loopback: memrl's own metric and reward functions in a batch, a judge
through a real OpenAI-compatible back-end (memrl's LLM server with a scripted model), bad input, wrong
tokens, size limits, and a bounded load test that prints requests per second."""

from __future__ import annotations

import json

import pytest

pytest.importorskip(
    "fastapi", reason="the reward server tests need the 'serve' extra: pip install 'memrl[serve]'"
)

import httpx  # noqa: E402

from memrl.llm import ScriptedLLM  # noqa: E402
from memrl.llm.openai_backend import OpenAILLM  # noqa: E402
from memrl.llm.server import serve  # noqa: E402
from memrl.rewards.memupdate import score_memupdate  # noqa: E402
from memrl.scoring import metrics as M  # noqa: E402
from memrl.server.http import Limits, ServerThread, Tokens  # noqa: E402
from memrl.server.load import run_load  # noqa: E402
from memrl.server.reward_api import create_reward_app  # noqa: E402

TOKEN = "verl-secret-1"

ITEMS = [
    {"metric": "locomo_f1", "prediction": "She moved in May 2023", "answer": "May 2023", "category": 2},
    {"metric": "token_f1", "prediction": "a red car", "answers": ["the red car", "blue"]},
    {"metric": "exact_match", "prediction": "Paris", "answers": ["paris"]},
    {"metric": "memagent", "response": "I read it all. \\boxed{Paris}", "answers": ["Paris"]},
    {"metric": "memagent", "response": "no box here", "answers": ["Paris"]},
    {"metric": "memupdate", "answer": "Lisbon", "retrieved_old": ["Alice likes tea"],
     "retrieved_new": ["Alice lives in Lisbon"], "old_texts": ["Alice likes tea"],
     "new_texts": ["Alice likes tea", "Alice lives in Lisbon"]},
]  # fmt: skip


def judge_rule(messages, tools, schema):
    text = messages[-1]["content"]
    if "Model answer: crash" in text:
        return "not json at all"
    right = text.split("Gold answer: ")[1].split("\n")[0] == text.split("Model answer: ")[1].strip()
    return json.dumps({"reasoning": "compared", "label": "CORRECT" if right else "WRONG"})


@pytest.fixture
def reward_server():
    with serve(ScriptedLLM(judge_rule)) as llm_url:
        judge = OpenAILLM("scripted-judge", base_url=llm_url, api_key="x", max_retries=0)
        app = create_reward_app(Tokens.parse([f"verl={TOKEN}:*"]), Limits(max_body_bytes=50_000), judge=judge,
                                max_batch=50)  # fmt: skip
        with ServerThread(app) as server:
            yield server.base_url


def post(url: str, body, token: str | None = TOKEN, **kw) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.post(url + "/v1/score", json=body, headers=headers, timeout=30, **kw)


def test_scores_are_memrls_own_functions(reward_server) -> None:
    health = httpx.get(reward_server + "/health").json()
    assert health["status"] == "ok" and "judge" in health["metrics"] and health["judge"]
    r = post(reward_server, {"items": ITEMS})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert res[0]["score"] == pytest.approx(M.locomo_f1("She moved in May 2023", "May 2023", 2))
    assert res[1]["score"] == pytest.approx(
        M.best_over_golds(M.token_f1, "a red car", ["the red car", "blue"])
    )
    assert res[2]["score"] == 1.0
    assert res[3]["score"] == 1.0 and res[3]["metrics"]["has_boxed"] == 1.0
    assert res[4]["score"] == 0.0
    expected = score_memupdate("Lisbon", ["Alice likes tea"], ["Alice lives in Lisbon"], ["Alice likes tea"],
                               ["Alice likes tea", "Alice lives in Lisbon"])  # fmt: skip
    assert res[5]["score"] == pytest.approx(expected.value) and res[5]["metrics"]["p_new"] == 1.0


def test_judge_verdicts_and_failures_are_never_rewards(reward_server) -> None:
    items = [
        {"metric": "judge", "question": "Where?", "answer": "Lisbon", "prediction": "Lisbon"},
        {"metric": "judge", "question": "Where?", "answer": "Lisbon", "prediction": "Porto"},
        {"metric": "judge", "question": "Where?", "answer": "Lisbon", "prediction": "crash"},
        ITEMS[2],
    ]
    body = post(reward_server, {"items": items}).json()
    assert [r["score"] for r in body["results"]] == [1.0, 0.0, None, 1.0]
    assert "unparsable judge reply" in body["results"][2]["error"] and body["failed"] == 1


def test_bad_requests_and_tokens(reward_server) -> None:
    cases = [
        ({"items": [{"metric": "bleu9", "prediction": "x", "answers": ["x"]}]}, 422, "metric"),
        ({"items": [{"metric": "token_f1", "prediction": "x"}]}, 422, "answers"),
        ({"items": [{"metric": "token_f1", "prediction": 3, "answers": ["x"]}]}, 422, "prediction"),
        ({"items": [{"metric": "token_f1", "prediction": "x", "answers": []}]}, 422, "answers"),
        ({"items": []}, 422, "items"),
        ({"items": [ITEMS[2]] * 51}, 413, "limit is 50"),
        ({"items": [{**ITEMS[2], "prediction": "x" * 60_000}]}, 413, "larger than the limit"),
        ([1, 2], 400, "JSON object"),
    ]
    for body, status, words in cases:
        r = post(reward_server, body)
        assert r.status_code == status, (body if len(str(body)) < 200 else status, r.text)
        assert words in r.json()["error"]["message"]
    r = httpx.post(reward_server + "/v1/score", content=b'{"items": [', headers={
        "Authorization": f"Bearer {TOKEN}", "content-type": "application/json"})  # fmt: skip
    assert r.status_code == 400 and "malformed JSON" in r.json()["error"]["message"]
    assert post(reward_server, {"items": ITEMS}, token="wrong-token-123").status_code == 401
    assert post(reward_server, {"items": ITEMS}, token=None).json()["error"]["type"] == "unauthorized"


def test_a_judge_item_without_a_judge_is_refused_whole() -> None:
    with ServerThread(create_reward_app()) as server:
        r = post(server.base_url, {"items": [ITEMS[2], {"metric": "judge", "question": "q", "answer": "a",
                                                         "prediction": "a"}]}, token=None)  # fmt: skip
        assert r.status_code == 422 and "items[1]" in r.json()["error"]["message"]


def test_bounded_load(reward_server, capsys) -> None:
    batch = {"items": ITEMS * 4}
    rep = run_load(
        reward_server, TOKEN, clients=8, per_client=20, make_request=lambda c, i: ("POST", "/v1/score", batch)
    )
    assert rep.statuses == {200: 160}
    first = rep.results[0][3]["results"]
    assert all(body["results"] == first for *_, body in rep.results)  # same input, same scores, every time
    with capsys.disabled():
        print(f"\n[load] reward: {rep.requests} requests of {len(batch['items'])} items from 8 clients: "
              f"{rep.rps:.0f} req/s", end="")  # fmt: skip


def test_a_web_page_cannot_spend_the_judge(reward_server) -> None:
    """The browser guard: a cross-origin or text/plain POST (what a page can send without asking) and a
    rebound Host are refused before any route runs, so no judge call is made."""
    url = reward_server
    body = json.dumps({"items": [{"metric": "judge", "question": "q", "answer": "a", "prediction": "a"}]})
    auth = {"Authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    cases = [({"origin": "http://127.0.0.1:1"}, 403), ({"host": "evil.example"}, 421),
             ({"content-type": "text/plain"}, 415), ({"origin": url}, 200)]  # fmt: skip
    for headers, status in cases:
        r = httpx.post(url + "/v1/score", content=body, headers={**auth, **headers}, timeout=30)
        assert r.status_code == status, (headers, r.text)


def test_adversarial_items_pay_a_committed_refusal_only(reward_server) -> None:
    """Category 5 paid any sentence containing "not mentioned", an answer hedged with a refusal included."""
    items = [
        {"metric": "answer_f1", "prediction": p, "answers": ["adoption agencies"], "category": 5}
        for p in ("adoption agencies (not mentioned)", "it is not mentioned, probably yoga", "Not mentioned in the conversation")
    ]  # fmt: skip
    items.append({"metric": "sub_em", "prediction": "Likely yes likely no", "answers": ["Likely no"]})
    res = post(reward_server, {"items": items}).json()["results"]
    assert [r["score"] for r in res] == [0.0, 0.0, 1.0, 0.0]


def test_compute_score_through_the_server_scores_a_long_reply_as_in_process(reward_server) -> None:
    """The server takes at most 20,000 characters a field: verl's compute_score sends the part of a reply
    that MemAgent's score reads (from its last box on), so a long reasoning trace is scored, not refused."""
    from memrl.integrations.verl.reward import compute_score

    gold = "the " + "x" * 380 + " end"  # 388 characters: LoCoMo has one
    golds = json.dumps(["Paris", gold])
    for reply in ("step. " * 5000 + r"\boxed{Paris}", "step. " * 5000 + rf"\boxed{{{gold}}}",
                  r"\boxed{Paris}" + " more" * 100, "step. " * 5000):  # fmt: skip
        local = compute_score("memrl/read", reply, golds, {"task": "read"})
        remote = compute_score("memrl/read", reply, golds, {"task": "read"}, reward_server=reward_server,
                               reward_token=TOKEN)  # fmt: skip
        assert remote["score"] == local["score"], reply[-60:]
    assert [compute_score("memrl/read", r, golds, {"task": "read"}, reward_server=reward_server,
                          reward_token=TOKEN)["score"] for r in ("x" * 30_000 + r"\boxed{Paris}",
                                                                 "x" * 30_000 + rf"\boxed{{{gold}}}")] == [1.0, 1.0]  # fmt: skip


def test_the_memupdate_item_scores_as_an_episode_does(reward_server) -> None:
    """The question's own tokens are not the answer's to cover, and probe questions charge what the edit
    broke: the same function the episode calls, with the same arguments."""
    from memrl.rewards.memupdate import Probe

    item = {"metric": "memupdate", "answer": "Lisbon", "question": "Where does Alice live, Lisbon?",
            "retrieved_old": ["Alice likes tea"], "retrieved_new": ["Alice lives in Lisbon"],
            "old_texts": ["Alice likes tea", "Bob sings"], "new_texts": ["Alice likes tea", "Alice lives in Lisbon"],
            "probes": [{"answer": "sings", "question": "What does Bob do?", "retrieved_old": ["Bob sings"],
                        "retrieved_new": ["Alice lives in Lisbon"]}]}  # fmt: skip
    res = post(reward_server, {"items": [item, {**item, "question": None}]}).json()["results"]
    assert res[0]["score"] is None and "no scorable token" in res[0]["error"]  # the question gives it away
    expected = score_memupdate("Lisbon", ["Alice likes tea"], ["Alice lives in Lisbon"], item["old_texts"],
                               item["new_texts"], probes=[Probe("sings", "What does Bob do?", ["Bob sings"],
                                                                ["Alice lives in Lisbon"])])  # fmt: skip
    assert res[1]["score"] == pytest.approx(expected.value) and res[1]["metrics"][
        "collateral"
    ] == pytest.approx(0.9)
    bad = post(reward_server, {"items": [{**item, "probes": [{"answer": "x"}]}]})
    assert bad.status_code == 422
