"""Train/test splits used by the original systems, and a seeded splitter for when none is published.

- :data:`LOCOMO_UPDATE_SPLIT`: MemUpdate's 7 train / 3 test LoCoMo conversations. MemUpdate
  (Astera-org/memupdate, ``memupdate/data/preprocess_locomo.py``) shuffles the indices ``0..9`` of
  ``locomo10.json`` with ``random.seed(42)`` and takes the first 7 as train; the ids below are the
  result of that shuffle on the published file, written out so they do not depend on file order.
- :data:`MEMBUILDER_LONGMEMEVAL_SPLIT`: MemBuilder's 50 SFT / 50 RL / 400 test LongMemEval question
  ids, from ``data/longmemeval/splits/longmemeval_splits.json`` in Zh1yuShen/MemBuilder (they cover all
  500 questions once).
- :data:`LOCOMO_PROTOCOL_SPLIT`: the learning protocol's LoCoMo parts (docs/training.md): MemUpdate's
  train conversations cut by :func:`seeded_split` (seed 0) into ``fit`` (5, what a trainer learns from)
  and ``validation`` (2, where every setting is chosen), and the 3 ``test`` conversations, evaluated once
  per final setting. ``--split fit`` and ``--split validation`` name them wherever ``--split`` is taken.
- :func:`seeded_split`: a documented, deterministic split for other data sets.
- :data:`SPLITS`, :data:`TRAIN_SPLITS`, :func:`evaluation_items`: the split guard of every trainer (a
  trainer defaults to the training split and refuses an item of an evaluation split unless told so).

Usage::

    from memrl.data import load_locomo, select, LOCOMO_UPDATE_SPLIT
    convs, report = load_locomo(path)
    train = select(convs, LOCOMO_UPDATE_SPLIT["train"])
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import Any

from memrl.errors import DataError

LOCOMO_UPDATE_SPLIT: dict[str, tuple[str, ...]] = {
    "train": ("conv-48", "conv-42", "conv-41", "conv-49", "conv-44", "conv-47", "conv-50"),
    "test": ("conv-43", "conv-26", "conv-30"),
}

#: ``seeded_split(LOCOMO_UPDATE_SPLIT["train"], {"validation": 2, "fit": None}, seed=0)``, written out
#: (tests check it) so that it cannot drift.
LOCOMO_PROTOCOL_SPLIT: dict[str, tuple[str, ...]] = {
    "fit": ("conv-41", "conv-42", "conv-47", "conv-49", "conv-50"),
    "validation": ("conv-44", "conv-48"),
    "test": LOCOMO_UPDATE_SPLIT["test"],
}

_MEMBUILDER_SFT = """
00ca467f 01493427 06db6396 0862e8bf 1192316e 1a8a66a6 1c0ddc50 1e043500 2133c1b5 2133c1b5_abs
3ba21379 3fdac837 4b24c848 4bc144e2 5025383b 6ade9755 7024f17c 73d42213 7527f7e2 76d63226 7e974930
80ec1f4f_abs 86b68151 8752c811 88432d0a 89941a94 91b15a6e 945e3d21 aae3761f b6025781 c18a7dc8
ce6d2d27 d01c6aa8 d682f1a2 dfde3500 e25c3b8d f523d9fe gpt4_15e38248 gpt4_1d80365e gpt4_2ba83207
gpt4_372c3eed_abs gpt4_5501fe77 gpt4_8279ba03 gpt4_88806d6e gpt4_b4a80587 gpt4_b5700ca0
gpt4_e061b84f gpt4_f420262d gpt4_fa19884d gpt4_fe651585
"""

_MEMBUILDER_RL = """
0100672e 15745da0_abs 19b5f2b3 19b5f2b3_abs 1b9b7252 1c549ce4 2311e44b 2a1811e2 2bf43736 32260d93
36b9f61e 51a45a95 58ef2f1c 60036106 61f8c8f8 6456829e 6456829e_abs 6aeb4375 726462e0 7e00a6cb
8fb83627 993da5e2 9bbe84a2 a1cc6108 a3332713 a96c20ee_abs bc8a6e93 c4ea545c c5e8278d cc06de0d
d3ab962e d905b33f e493bb7c e6041065 ec81a493 eeda8a6d ef66a6e5 f685340e_abs f8c5f88b fca762bc
gpt4_1e4a8aec gpt4_2f91af09 gpt4_31ff4165 gpt4_468eb064 gpt4_65aabe59 gpt4_74aed68e gpt4_8e165409
gpt4_d9af6064 gpt4_e05b82a6 gpt4_f420262c
"""

_MEMBUILDER_TEST = """
001be529 031748ae 031748ae_abs 06878be2 06f04340 07741c44 07741c45 078150f1 07b6f563 0862e8bf_abs
08e075c7 08f4fc43 0977f2af 099778bb 09ba9854 09ba9854_abs 09d032c9 0a34ad58 0a995998 0bb5a684
0bc8ad92 0bc8ad93 0db4c65d 0ddfec37 0ddfec37_abs 0e4e4c46 0e5e2d1a 0ea62687 0edc2aef 0f05491a
10d9b85a 10e09553 118b2229 129d1232 1568498a 15745da0 157a136e 16c90bf4 184da446 18bc8abd 18dcd5a5
1903aded 195a1a1b 1a1907b4 1cea1afa 1d4da289 1d4e3b97 1da05512 1de5cff2 1f2b8d4f 1faac195 21436231
21d02d0d 22d2cb42 2311e44b_abs 2318644b 25e5aa4f 2698e78f 2698e78f_abs 26bdc477 27016adc 2788b940
28bcfaac 28dc39ac 29f2956b 29f2956b_abs 2b8f3739 2c63a862 2ce6a0f2 2e6d26dc 2ebe6c90 2ebe6c92
311778f1 3249768e 352ab8bd 35a27287 36580ce8 370a8ff4 37d43f65 37f165cf 38146c39 3a704032 3b6f954b
3c1045c8 3d86fd0a 3e321797 3f1e9474 3fe836c9 4100d0a0 41275add 41698283 42ec0761 4388e9dd 45dc21b6
46a3abf7 488d3006 4adc0475 4baee567 4c36ccef 4d6b87c8 4dfccbf7 4dfccbf8 4f54b7c9 4fd1909e 505af2f5
50635ada 51b23612 51c32626 54026fce 545bd2b5 55241a1f 561fabcd 577d4d32 57f827a0 5809eb10 5831f84d
58470ed2 58bf7951 59524333 5a4f22c0 5a7937c8 5c40ec5b 5d3d2817 5e1b23de 60159905 603deb26 60472f9c
6071bd76 60bf93ed 60bf93ed_abs 60d45044 618f13b2 6222b6eb 65240037 6613b389 66f24dbb 67e0d0f2
681a1674 69fee5aa 6a1eabeb 6a27ffc2 6ae235be 6aeb4375_abs 6b168ec8 6b7dfb22 6c49646a 6cb6f249
6d550036 6e984301 6e984302 6f9b354f 70b3e69b 71017276 71017277 71315a70 7161e7e2 71a3fd6b 720133ac
72e3ee87 7401057b 7405e8b1 75499fd8 75832dbd 75f70248 778164c6 77eafa52 7a87bd0c 7a8d0b71 8077ef71
80ec1f4f 81507db6 830ce83f 8464fc84 852ce960 853b0a1d 8550ddae 85fa3a3f 86f00804 87f22b4a
88432d0a_abs 89527b6b 8979f9ec 89941a93 8a137a7f 8a2466db 8aef76bc 8b9d4367 8c18457d 8cf4d046
8cf51dda 8e91e7d9 8e9d538c 8ebdbe50 92a0aa75 94f70d80 95228167 95bcc1c8 982b5123 982b5123_abs
9a707b81 9a707b82 9aaed6a3 9d25d4e0 9ea5eabc 9ee3ecd6 a06e4cfe a08a253f a11281a2 a1eacc2a a2f3aa27
a3045048 a346bb18 a3838d2b a40e080f a4996e51 a82c026e a89d7624 a96c20ee a9f6b44c ac031881 ad7109d1
af082822 af8d2e46 afdc33df affe2881 b01defab b0479f84 b29f3365 b320f3f8 b3c15d39 b46e15ed b46e15ee
b5ef892d b6019101 b759caee b86304ba b9cfe692 ba358f49 ba358f49_abs ba61f0b9 bb7c3b45 bbf86515
bc149d6b bc8a6e93_abs bcbe585f bf659f65 c14c00dd c19f7a0b c2ac3c61 c4a1ceb8 c4f10528 c6853660
c7cf7dfd c7dc5443 c8090214 c8090214_abs c8c3f81d c8f1aeed c960da58 c9f37c46 caf03d32 caf9ead2
cc539528 cc5ded98 cc6d1ec1 ccb36322 ceb54acb cf22b7bf d23cf73b d24813b1 d52b4f67 d596882b d6062bb9
d6233ab6 d7c942c3 d851d5ba dad224aa db467c8c dc439ea3 dccbc061 dcfa8644 dd2973ad e01b8e2f e3038f8c
e3fc4d6e e47becba e48988bc e4e14d04 e56a43b9 e5ba910e_abs e61a7584 e66b632c e831120c e8a79c70
e9327a54 e982271f eac54adc eac54add eaca4986 eace081b ed4ddc30 edced276 edced276_abs eeda8a6d_abs
ef9cf60a efc3f7c2 f0853d11 f0e564bc f35224e0 f4f1d8a4 f4f1d8a4_abs f685340e f9e8c073 faba32e5
fca70973 fea54f57 gpt4_0a05b494 gpt4_0b2f1d21 gpt4_18c2b244 gpt4_1916e0ea gpt4_194be4b3
gpt4_1a1dc16d gpt4_1d4ab0c9 gpt4_1e4a8aeb gpt4_213fd887 gpt4_21adecb5 gpt4_2312f94c gpt4_2487a7cb
gpt4_2655b836 gpt4_2c50253f gpt4_2d58bcd6 gpt4_2f56ae70 gpt4_2f584639 gpt4_2f8be40d gpt4_372c3eed
gpt4_385a5000 gpt4_45189cb4 gpt4_468eb063 gpt4_483dd43c gpt4_4929293a gpt4_4929293b gpt4_4cd9eba1
gpt4_4edbafa2 gpt4_4ef30696 gpt4_4fc4f797 gpt4_5438fa52 gpt4_59149c77 gpt4_59149c78 gpt4_59c863d7
gpt4_5dcc0aab gpt4_61e13b3c gpt4_68e94287 gpt4_68e94288 gpt4_6dc9b45b gpt4_6ed717ea gpt4_70e84552
gpt4_70e84552_abs gpt4_731e37d7 gpt4_76048e76 gpt4_78cf46a3 gpt4_7a0daae1 gpt4_7abb270c
gpt4_7bc6cf22 gpt4_7ca326fa gpt4_7ddcf75f gpt4_7de946e7 gpt4_7f6b06db gpt4_7fce9456 gpt4_8279ba02
gpt4_85da3956 gpt4_8c8961ae gpt4_93159ced gpt4_93159ced_abs gpt4_93f6379c gpt4_98f46fc6
gpt4_9a159967 gpt4_a1b77f9c gpt4_a2d1d1f6 gpt4_a56e767c gpt4_ab202e7f gpt4_af6db32f gpt4_b0863698
gpt4_b5700ca9 gpt4_c27434e8 gpt4_c27434e8_abs gpt4_cd90e484 gpt4_d12ceb0e gpt4_d31cdae3
gpt4_d6585ce8 gpt4_d6585ce9 gpt4_d84a3211 gpt4_e061b84g gpt4_e072b769 gpt4_e414231e gpt4_e414231f
gpt4_ec93e27f gpt4_f2262a51 gpt4_f49edff3 gpt4_fa19884c gpt4_fe651585_abs
"""

MEMBUILDER_LONGMEMEVAL_SPLIT: dict[str, tuple[str, ...]] = {
    "sft": tuple(_MEMBUILDER_SFT.split()),
    "rl": tuple(_MEMBUILDER_RL.split()),
    "test": tuple(_MEMBUILDER_TEST.split()),
}


#: The published splits by data set name.
SPLITS: dict[str, dict[str, tuple[str, ...]]] = {
    "locomo": {**LOCOMO_UPDATE_SPLIT, **LOCOMO_PROTOCOL_SPLIT},
    "longmemeval": MEMBUILDER_LONGMEMEVAL_SPLIT,
}
#: The split a trainer takes when none is named (LongMemEval: MemBuilder's RL questions).
TRAIN_SPLITS: dict[str, str] = {"locomo": "train", "longmemeval": "rl", "ruler-locomo": "train"}
#: Splits held out for evaluation: no trainer may touch them unless explicitly allowed.
EVAL_SPLITS: dict[str, tuple[str, ...]] = {"locomo": ("test",), "longmemeval": ("test",)}
#: Data sets built from another one's conversations (their ``--split`` is the source's), and where an
#: item names its source.
DERIVED: dict[str, str] = {"ruler-locomo": "locomo"}


def _source_id(record: Any) -> str:
    """The id of the original conversation a record comes from (a RULER-LoCoMo document names its question,
    ``conv-26:q3``, whose conversation is ``conv-26``)."""
    qid = (getattr(record, "metadata", None) or {}).get("question_id")
    return str(qid).split(":", 1)[0] if qid else str(record.id)


def evaluation_items(dataset: str, records: Sequence[Any]) -> list[str]:
    """Ids of ``records`` that belong to an evaluation split of ``dataset`` (or of the data set it was built
    from), in order; empty for a data set without a published split."""
    base = DERIVED.get(dataset, dataset)
    held = {i for name in EVAL_SPLITS.get(base, ()) for i in SPLITS[base][name]}
    ids = [str(r.id) for r in records if (_source_id(r) if base != dataset else str(r.id)) in held]
    return list(dict.fromkeys(ids))


def seeded_split(
    ids: Iterable[str], sizes: dict[str, int | None], *, seed: int = 0
) -> dict[str, tuple[str, ...]]:
    """Split ``ids`` into named parts of the given sizes, deterministically.

    The ids are sorted (so input order does not matter), shuffled with ``random.Random(seed)`` and cut
    into consecutive parts in the order of ``sizes``; one size may be ``None`` for "all the rest".
    Each part is returned sorted. Raises ``ValueError`` if the sizes need more ids than there are.
    """
    pool = sorted(set(ids))
    random.Random(seed).shuffle(pool)
    fixed = sum(n for n in sizes.values() if n is not None)
    rest = [name for name, n in sizes.items() if n is None]
    if len(rest) > 1:
        raise ValueError("at most one part may have size None (the rest)")
    if fixed > len(pool):
        raise ValueError(f"split sizes add up to {fixed} but there are only {len(pool)} ids")
    out: dict[str, tuple[str, ...]] = {}
    start = 0
    for name, n in sizes.items():
        n = len(pool) - fixed if n is None else n
        out[name] = tuple(sorted(pool[start : start + n]))
        start += n
    return out


def select(records: Sequence[Any], ids: Iterable[str]) -> list[Any]:
    """The records (anything with an ``id``) whose id is in ``ids``, in the order of ``records``.

    Raises :class:`~memrl.errors.DataError` naming ids that match no record, so a stale split is noticed.
    """
    wanted = set(ids)
    chosen = [r for r in records if r.id in wanted]
    missing = wanted - {r.id for r in chosen}
    if missing:
        raise DataError(f"no record with id {', '.join(sorted(missing)[:5])} ({len(missing)} missing)")
    return chosen
