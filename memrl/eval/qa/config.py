"""What a QA evaluation run depends on (:class:`QAEvalConfig`, whose fields are the flags of ``memrl eval``)
and the conversations and questions it selects (:func:`load_conversations`).

:mod:`memrl.eval.qa.run` runs it; ``memrl train`` and the benchmarks use the same selection::

    cfg = QAEvalConfig(dataset="locomo", split="test", questions=50)
    conversations = load_conversations(cfg)     # the run's conversations, their questions selected
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Literal

from memrl.config import option
from memrl.data.types import Conversation
from memrl.errors import ConfigError

Mode = Literal["full", "build", "answer"]

#: Builders that keep no memory store: they read the conversation per question.
READERS = ("memagent", "full")


@dataclasses.dataclass(frozen=True)
class QAEvalConfig:
    """Everything a QA evaluation run depends on; ``memrl eval`` flags map 1:1 onto these fields."""

    dataset: str = option(
        "locomo",
        "benchmark: locomo, longmemeval, perltqa, hotpotqa, ruler-hotpotqa, ruler-locomo or sample (bundled)",
    )
    data_path: str | None = option(
        None, "data file or folder (default: $MEMRL_DATA_DIR, then ~/.cache/memrl/data)"
    )
    lengths: tuple[str, ...] = option(
        (), "ruler-hotpotqa / ruler-locomo: context lengths to build, e.g. 7k,14k,28k or 50docs (default 7k)"
    )
    seed: int = option(0, "seed of the RULER contexts (which distractors, in which order)")
    conv_id: tuple[str, ...] = option(
        (), "only these conversations (LoCoMo sample ids, LongMemEval question ids, PerLTQA names)",
        aliases=("--sample-id", "--character-id"),
    )  # fmt: skip
    split: str | None = option(
        None, "an original split: LoCoMo train|test (MemUpdate), LongMemEval sft|rl|test"
    )
    mode: Mode = option("full", "build memory, answer questions, or both")
    builder: Literal["raw", "membuilder", "annotations", "union", "memagent", "full"] = option(
        "raw",
        "how memory is built: raw turns, membuilder's agents, annotations (membuilder's agents answered by "
        "LoCoMo's annotations, no LLM: the SFT expert's memory), union (raw turns and membuilder's notes, "
        "or annotations' with --builder-option notes=annotations, in one namespace, labelled by "
        "metadata origin=raw|notes); memagent reads instead; full: no memory, "
        "the whole conversation in the answer prompt where it fits (--builder-option context_window=N "
        "overflow=truncate|skip tokenizer=model|whitespace)",
    )
    builder_option: tuple[str, ...] = option(
        (), "KEY=VALUE settings of the builder's config (e.g. context=full for membuilder)"
    )
    system: str = option(
        "memrl",
        "memory system: memrl (memrl's --builder, native, resumable), memrl:BUILDER (the same behind the "
        "MemorySystem interface), mem0 (mem0ai, infer on), mem0-raw (infer off), langmem; the answerer and "
        "judge are this run's for all",
    )
    system_base_url: str | None = option(
        None, "OpenAI-compatible endpoint of the system's own LLM and embedder calls (default: --base-url)"
    )
    system_model: str | None = option(None, "chat model of the system's own LLM calls (default: --model)")
    system_embed_model: str = option("text-embedding-3-small", "embedding model of the system's own calls")
    system_embed_dims: int = option(1536, "dimension of --system-embed-model's vectors")
    updater: Literal["none", "memupdate"] = option(
        "none", "edit the built memory with this agent before answering"
    )
    provider: str = option("local", "LLM back-end for building and answering: local, openai, scripted")
    model: str | None = option(None, "model name (local default: SmolLM2-135M-Instruct, offline)")
    base_url: str | None = option(None, "OpenAI-compatible server URL (vLLM, SGLang, Ollama, ...)")
    builder_model: str | None = option(
        None,
        "model of membuilder's agents when it differs from the answerer's (same provider): e.g. an SFT "
        "checkpoint builds while --model answers (default: --model)",
    )
    judge_provider: str | None = option(None, "LLM back-end of the judge (default: same as --provider)")
    judge_model: str | None = option(None, "judge model; without it no LLM judge runs (F1/EM only)")
    judge_base_url: str | None = option(None, "judge server URL (default: --base-url)")
    judge: str = option(
        "auto",
        "judge prompt and protocol: longmemeval (official, per type, yes/no), mem0 or membuilder (LoCoMo, "
        "published, verbatim), strict (memrl's own); auto: longmemeval on LongMemEval, strict elsewhere",
    )
    judge_rates: str | None = option(
        None,
        "the judge's measured error rates (a `memrl eval judge-check` output folder or judge_rates.json); "
        "default: the rates judge-check recorded for this judge, model and template, if any",
    )
    gold: Literal["original", "corrected"] = option(
        "original",
        "LoCoMo: corrected also scores every answer against locomo-audit's corrected answers and evidence "
        "(reports give both figures)",
    )
    audit_path: str | None = option(
        None, "locomo-audit's errors.json (default: DATA/locomo-audit/errors.json in the data folder)"
    )
    top_k: int = option(10, "memories retrieved per question")
    db_path: str | None = option(None, "memory store file (default: OUTPUT_DIR/memory.db)")
    namespace_format: str = option(
        "{conv}@{builder}",
        "namespace of a conversation's memory; '{conv}' answers from a `memrl build` store",
    )
    questions: int | None = option(
        None, "at most this many questions per conversation (documents data sets: in all, per length)"
    )
    sessions: int | None = option(None, "build only the first N sessions (and ask only about them)")
    concurrency: int = option(4, "questions answered at once")
    output_dir: str | None = option(None, "where results go (default: runs/DATASET-BUILDER)")
    resume: bool = option(False, "continue an interrupted run in OUTPUT_DIR")
    overwrite: bool = option(False, "delete earlier results in OUTPUT_DIR first")
    include_adversarial: bool = option(False, "LoCoMo: also ask category-5 questions (gold: not answerable)")
    embedder: str = option("minilm", "embedder for memory search: minilm, hashing, openai:MODEL")
    max_answer_tokens: int = option(48, "token budget of an answer")
    cache: bool = option(True, "cache deterministic LLM calls on disk (OUTPUT_DIR/llm_cache.sqlite)")

    def __post_init__(self) -> None:
        if self.resume and self.overwrite:
            raise ConfigError("--resume keeps earlier results and --overwrite deletes them: pass one")
        if self.top_k < 1 or self.concurrency < 1:
            raise ConfigError("--top-k and --concurrency must be at least 1")
        for name in ("questions", "sessions"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(f"--{name} must be at least 1")
        if self.builder in READERS and self.mode == "build":
            raise ConfigError(
                f"{self.builder} reads the conversation per question; it builds no memory (use --mode full)"
            )
        if self.system != "memrl":
            from memrl.eval.systems import SYSTEMS

            if self.system not in SYSTEMS and not self.system.startswith("memrl:"):
                raise ConfigError(f"--system {self.system!r}: choose memrl, {', '.join(SYSTEMS)}")
            if self.mode != "full" or self.resume or self.updater != "none" or self.builder in READERS:
                raise ConfigError(
                    f"--system {self.system} ingests and answers in one run (--mode full, no --resume, "
                    "--updater or reader builder): its store is its own"
                )
        if self.builder in READERS and self.updater != "none":
            raise ConfigError(f"--updater edits a memory store; {self.builder} keeps none")
        if "{conv}" not in self.namespace_format:
            raise ConfigError("--namespace-format must contain {conv} (one namespace per conversation)")
        try:
            self.namespace_format.format(conv="c", builder="b")
        except (KeyError, IndexError, ValueError) as e:
            raise ConfigError(
                f"--namespace-format {self.namespace_format!r}: unknown field {e}; use {{conv}} and {{builder}}"
            ) from None
        from memrl.data.catalog import LENGTH_DATASETS, canonical

        object.__setattr__(self, "dataset", canonical(self.dataset))
        if self.lengths:
            from memrl.data.ruler import parse_lengths

            if self.dataset not in LENGTH_DATASETS:
                raise ConfigError(
                    f"--lengths is for {' and '.join(LENGTH_DATASETS)}, not --dataset {self.dataset}"
                )
            parse_lengths(self.lengths)  # a bad length fails here, before anything runs
        if self.builder == "memagent" and self.builder_option:
            self.memagent_config()  # a bad option fails here
        if self.builder == "full" and self.builder_option:
            from memrl.config import parse_options
            from memrl.eval.qa.full_context import FullContextConfig

            parse_options(FullContextConfig, self.builder_option)
        from memrl.scoring.judges import JUDGE_NAMES

        if self.judge not in (*JUDGE_NAMES, "auto"):
            raise ConfigError(f"--judge {self.judge!r}: choose auto, {', '.join(JUDGE_NAMES)}")
        if self.judge_name == "longmemeval" and self.dataset != "longmemeval":
            raise ConfigError(
                "--judge longmemeval has templates for LongMemEval's question types only; on "
                f"{self.dataset} use --judge mem0, membuilder or strict"
            )
        if self.gold == "corrected" and self.dataset != "locomo":
            raise ConfigError(
                f"--gold corrected applies locomo-audit's corrections to LoCoMo, not {self.dataset}"
            )

    @property
    def judge_name(self) -> str:
        """The judge ``--judge`` names (``auto``: the data set's published one, else strict)."""
        from memrl.scoring.judges import default_judge

        return default_judge(self.dataset) if self.judge == "auto" else self.judge

    @property
    def out(self) -> Path:
        name = self.builder if self.system == "memrl" else self.system.replace(":", "-")
        return Path(self.output_dir or f"runs/{self.dataset}-{name}")

    def namespace(self, conv: Conversation) -> str:
        return self.namespace_format.format(conv=conv.id, builder=self.builder)

    def memagent_config(self) -> Any:
        """MemAgent's reading settings: ``--builder-option chunk_tokens=5000 memory_tokens=1024 ...``."""
        from memrl.agents.memagent import MemAgentConfig
        from memrl.config import parse_options

        return parse_options(MemAgentConfig, self.builder_option, chunk_tokens=1500, memory_tokens=256)


# ---------------------------------------------------------------------------------------------- data
def load_conversations(cfg: QAEvalConfig) -> list[Conversation]:
    """The conversations of the run, with their questions selected (split, ids, sessions, count)."""
    from memrl.data import DOCUMENT_DATASETS
    from memrl.data import load_conversations as load
    from memrl.data.splits import DERIVED, SPLITS

    documents = cfg.dataset in DOCUMENT_DATASETS
    # a data set built from another one's conversations (ruler-locomo) takes a split of the source: its
    # documents are built from that split's conversations only, gold and distractor sessions alike
    base = DERIVED.get(cfg.dataset)
    sources = None
    if cfg.split and base is not None:
        if cfg.split not in SPLITS.get(base, {}):
            raise ConfigError(f"dataset {cfg.dataset!r} has no split {cfg.split!r}")
        sources = SPLITS[base][cfg.split]
    convs, _report = load(
        cfg.dataset, cfg.data_path, lengths=cfg.lengths, seed=cfg.seed, include_adversarial=cfg.include_adversarial,
        questions=cfg.questions if documents and not cfg.conv_id else None, sources=sources,
    )  # fmt: skip
    wanted: set[str] | None = set(cfg.conv_id) if cfg.conv_id else None
    if cfg.split and sources is None:
        table = SPLITS.get(cfg.dataset)
        if table is None or cfg.split not in table:
            raise ConfigError(f"dataset {cfg.dataset!r} has no split {cfg.split!r}")
        ids = set(table[cfg.split])
        wanted = ids if wanted is None else wanted & ids
    if wanted is not None:
        missing = wanted - {c.id for c in convs}
        if cfg.conv_id and missing and not cfg.split:
            raise ConfigError(f"unknown conversation ids: {', '.join(sorted(missing))}")
        convs = [c for c in convs if c.id in wanted]
    out = []
    for c in convs:
        sessions = c.sessions if cfg.sessions is None else c.sessions[: cfg.sessions]
        built = {s.index for s in sessions}
        qs = [q for q in c.questions if set(q.evidence_sessions) <= built]
        if cfg.questions is not None:
            qs = qs[: cfg.questions]
        out.append(dataclasses.replace(c, sessions=tuple(sessions), questions=tuple(qs)))
    if not out:
        raise ConfigError("no conversation selected: check --conv-id / --split")
    if not any(c.questions for c in out):
        raise ConfigError("no question selected: check --questions / --sessions / --conv-id")
    return out
