"""RULER's synthetic tasks: seeded and reproducible (checksums), needles at their depths, answers true of the
text by construction, prompts that fill the target length, and RULER's two metrics."""

from __future__ import annotations

import re
from collections import Counter
from itertools import product

import pytest

from memrl.data.ruler.needles import DEPTHS, insert_at_depths
from memrl.data.ruler.synthetic import (
    NOISE,
    RULER_TASKS,
    TASKS,
    WordLists,
    generate,
    load_essays,
    read_items,
    write_items,
)
from memrl.errors import ConfigError, DataError
from memrl.scoring.metrics import string_match_all, string_match_part

WORDS = WordLists(
    adjectives=("amber", "brisk", "calm", "dusty", "eager", "faint", "gentle", "hollow", "icy", "jolly",
                *("".join(p) + "y" for p in product("bklst", "ei", "ndz"))),
    nouns=("anchor", "badger", "candle", "dune", "engine", "ferry", "garden", "harbor", "island", "jacket",
           "kettle", "lantern", "meadow", "needle", "orchard", *("".join(p) for p in product("mnpr", "aou", "dgt"))),
    # made-up verbs, enough for cwe's uncommon words at 8k (3,200)
    verbs=tuple("".join(p) for p in product("bcdfghjk", "aeiou", "lmnprstv", "aeiou", "xz")),
)  # fmt: skip


def words(text: str) -> int:  # the fake tokenizer: one token per whitespace-separated word
    return len(text.split())


@pytest.fixture
def essays(tmp_path):
    folder = tmp_path / "paulgraham"
    folder.mkdir()
    for k in range(3):  # three small essays of numbered sentences, so a position can be read back
        (folder / f"e{k}.txt").write_text(" ".join(f"Essay {k} says thing {n} here." for n in range(300)))
    return load_essays(folder)


def gen(task, target=1000, essays=None, **kw):
    return generate(
        task, target, count=kw.pop("count", 3), count_tokens=words, words=WORDS, essays=essays, **kw
    )


SYNTHETIC = [t for t in RULER_TASKS if t != "qa_2"]


@pytest.mark.parametrize("task", SYNTHETIC)
def test_same_seed_same_bytes_other_seed_other_items(task, essays, tmp_path):
    a = write_items(gen(task, essays=essays, seed=1), tmp_path / "a.jsonl")
    b = write_items(gen(task, essays=essays, seed=1), tmp_path / "b.jsonl")
    c = write_items(gen(task, essays=essays, seed=2), tmp_path / "c.jsonl")
    assert a == b != c
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a.jsonl.sha256").read_text().split() == [a, "a.jsonl"]
    back = read_items(tmp_path / "a.jsonl")
    assert [i.to_dict() for i in back] == [i.to_dict() for i in gen(task, essays=essays, seed=1)]


def test_a_changed_file_fails_its_checksum(tmp_path, essays):
    path = tmp_path / "x.jsonl"
    write_items(gen("niah_single_1"), path)
    path.write_bytes(path.read_bytes().replace(b"magic", b"MAGIC", 1))
    with pytest.raises(DataError, match="does not match"):
        read_items(path)


@pytest.mark.parametrize("task", SYNTHETIC)
@pytest.mark.parametrize("target", [1000, 2000, 8000])
def test_prompt_plus_answer_fills_the_target(task, target, essays):
    for item in gen(task, target, essays=essays, count=2):
        assert item.prompt_tokens == words(item.prompt)
        room = target - TASKS[task].tokens_to_generate
        assert item.prompt_tokens <= room
        # within one haystack unit of the room: a noise sentence (18 words), an essay sentence (6), a
        # distractor needle (11), or a word list entry; 3% covers them at these lengths
        assert item.prompt_tokens >= room - max(20, 0.03 * target), (item.prompt_tokens, room)


def test_a_length_too_short_for_the_task_says_so():
    with pytest.raises(ConfigError, match="too short"):
        gen("niah_single_1", 100)


def test_single_needle_in_noise_at_its_depth():
    for item in gen("niah_single_1", 2000, count=5):
        (needle,) = item.metadata["needles"]
        key, value = re.match(r"One of the special magic numbers for (\S+) is: (\d+)\.", needle).groups()
        assert re.fullmatch(r"\d{7}", value) and item.answers == (value,)
        assert key in item.query and item.context.count(needle) == 1
        assert item.query == f"What is the special magic number for {key} mentioned in the provided text?"
        assert item.intro.startswith("A special magic number is hidden")
        n = item.metadata["haystack_units"]
        assert " ".join(item.context.replace(needle, "").split()) == " ".join([NOISE] * n)
        (depth,) = item.metadata["depths"]
        assert depth in DEPTHS
        before = item.context[: item.context.index(needle)].count(NOISE)
        assert before == round(n * depth / 100)


def test_essay_needles_sit_between_sentences(essays):
    for item in gen("niah_multikey_1", 2000, essays=essays):
        assert len(item.metadata["needles"]) == 4 and len(item.answers) == 1
        asked = item.query.split(" for ")[1].split(" mentioned")[0]
        assert f"for {asked} is: {item.answers[0]}." in item.context
        for needle in item.metadata["needles"]:
            assert f"here. {needle} Essay" in item.context or item.context.startswith(needle) \
                or item.context.endswith(f"here. {needle}")  # fmt: skip


def test_multivalue_multiquery_and_needle_haystacks(essays):
    (mv,) = gen("niah_multivalue", 2000, essays=essays, count=1)
    assert len(mv.answers) == 4 and all(f"is: {v}." in mv.context for v in mv.answers)
    assert mv.query.startswith("What are all the special magic numbers for")
    (mq,) = gen("niah_multiquery", 2000, essays=essays, count=1)
    keys = mq.metadata["keys"]
    assert len(keys) == 4 and mq.query.count(", ") == 3 and ", and " in mq.query
    assert [re.search(rf"for {k} is: (\d+)\.", mq.context)[1] for k in keys] == list(mq.answers)
    (m3,) = gen("niah_multikey_3", 2000, count=1)
    uuid4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
    found = re.findall(rf"One of the special magic uuids for ({uuid4}) is: ({uuid4})\.", m3.context)
    assert len(found) == m3.metadata["haystack_units"] + 1  # the haystack is all needles
    assert len({k for k, _ in found}) == len(found)  # a distractor never repeats the asked key
    assert re.fullmatch(uuid4, m3.answers[0])


def test_too_few_words_for_the_distractor_needles_is_an_error_not_a_hang():
    tiny = WordLists(("red", "blue"), ("fox", "owl"))
    with pytest.raises(DataError, match="too small"):
        generate("niah_multikey_2", 2000, count=1, count_tokens=words, words=tiny)


def test_insert_at_depths_puts_each_needle_at_its_share():
    out = insert_at_depths([f"u{i}" for i in range(10)], ["A", "B", "C"], [0, 50, 100])
    assert out.index("A") == 0 and out[out.index("B") - 1] == "u4" and out[-1] == "C"


def test_variable_tracking_chain_is_in_order_and_the_answer_is_every_variable():
    for item in gen("vt", 2000, count=4):
        lines = [ln for ln in item.context.split("\n") if ln.startswith("VAR ")]
        assert lines == item.metadata["statements"]
        first = re.fullmatch(r"VAR ([A-Z]{5}) = (\d{5})", lines[0])
        assert first and first[2] == item.query.split("value ")[1].split(" ")[0]
        holding = {first[1]}
        for ln in lines[1:]:  # follow the chain: each hop copies a variable that holds the value
            a, b = re.fullmatch(r"VAR ([A-Z]{5}) = VAR ([A-Z]{5})", ln).groups()
            assert b in holding
            holding.add(a)
        assert set(item.answers) == holding and len(holding) == 5
        assert "5 variables are assigned the value" in item.answer_prefix


@pytest.mark.parametrize("target", [2000, 8000])
def test_common_words_are_the_ten_most_common(target):
    for item in gen("cwe", target, count=2):
        entries = re.findall(r"^\d+\. (\S+)$", item.context, re.MULTILINE)
        assert len(entries) == len(item.context.splitlines())
        counts = Counter(entries)
        ranked = counts.most_common()
        assert {w for w, _ in ranked[:10]} == set(item.answers)
        assert ranked[9][1] > ranked[10][1]  # strictly more often than every other word
        expect = (30, 3) if target >= 4096 else (2, 1)
        assert (ranked[0][1], ranked[-1][1]) == expect


def test_cwe_stops_at_the_vocabulary():
    small = WordLists(WORDS.adjectives[:10], WORDS.nouns[:5])  # 15 words: 10 common, 5 others
    (item,) = generate("cwe", 8000, count=1, count_tokens=words, words=small)
    counts = Counter(re.findall(r"^\d+\. (\S+)$", item.context, re.MULTILINE))
    assert item.metadata["uncommon"] == 5 and len(counts) == 15  # no "uncommon" word repeated past 3
    assert sorted(counts.values()) == [3] * 5 + [30] * 10


def test_frequent_words_are_the_three_most_frequent_but_the_dots():
    for item in gen("fwe", 4000, count=3):
        counts = Counter(item.context.split())
        assert counts.most_common(1)[0][0] == "...."
        del counts["...."]
        ranked = counts.most_common()
        assert [w for w, _ in ranked[:3]] == list(item.answers)
        assert ranked[2][1] > ranked[3][1]
        assert all(re.fullmatch(r"[a-z]{6}", w) for w in counts)


def test_qa_2_wraps_ruler_hotpotqa_documents(tmp_path):
    from memrl.data.hotpotqa import load_hotpotqa
    from tests.hotpot_fixture import write_hotpot

    examples, _ = load_hotpotqa(write_hotpot(tmp_path, n_questions=12))
    items = gen("qa_2", 1500, hotpotqa=examples, count=4)
    assert [i.metric for i in items] == ["string_match_part"] * 4
    for item, ex in zip(items, examples, strict=False):
        assert item.answers == (ex.answer,) and item.query.endswith(f"Question: {ex.question}")
        assert f"The code of Thing {ex.id[2:].lstrip('0') or '0'} is {ex.answer}." in item.context
        assert item.prompt_tokens <= 1500 - TASKS["qa_2"].tokens_to_generate
        assert item.prompt_tokens > 1000  # distractors were added up to the length


def test_essay_tasks_need_essays_and_qa_needs_hotpotqa(tmp_path):
    with pytest.raises(DataError, match="essays"):
        gen("niah_single_2")
    with pytest.raises(DataError, match="HotpotQA"):
        gen("qa_2")
    with pytest.raises(DataError, match="no essays"):
        load_essays(tmp_path)
    with pytest.raises(ConfigError, match="unknown RULER task"):
        gen("niah_single_9")


def test_string_match_all_and_part_are_rulers():
    assert string_match_all("The numbers are 1234567 and 7654321.", ["1234567", "7654321"]) == 1.0
    assert string_match_all("only 1234567", ["1234567", "7654321"]) == 0.5
    assert string_match_all("ABCDE, fghij", ["abcde", "FGHIJ", "KLMNO"]) == pytest.approx(2 / 3)
    assert string_match_all("", ["x"]) == 0.0
    assert string_match_part("It was Paris, France", ["paris", "Lyon"]) == 1.0
    assert string_match_part("London", ["paris", "Lyon"]) == 0.0
    assert string_match_all("a\x00b 42\x07", ["ab 42"]) == 1.0  # control characters dropped, as RULER's
