"""What ``memrl eval ruler`` depends on: :class:`RulerEvalConfig`, whose fields are its flags.

:mod:`memrl.eval.ruler.run` runs it; :mod:`memrl.eval.ruler.report` turns its rows into tables.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from memrl.config import option
from memrl.data.ruler.synthetic import RULER_TASKS
from memrl.errors import ConfigError

READERS = ("memagent", "full")


@dataclasses.dataclass(frozen=True)
class RulerEvalConfig:
    """Everything a RULER evaluation depends on; ``memrl eval ruler`` flags map 1:1 onto these fields."""

    task: tuple[str, ...] = option(
        (), f"RULER tasks, comma-separated (default: all; qa_2 only where the HotpotQA file is found): "
        f"{', '.join(RULER_TASKS)}",
        aliases=("--tasks",),
    )  # fmt: skip
    lengths: tuple[str, ...] = option(
        ("1k", "2k", "4k", "8k"), "target lengths in the model's tokens, e.g. 1k,2k,4k,8k (up to 128k)"
    )
    questions: int = option(8, "items per task and length")
    seed: int = option(0, "seed of the generated items (the same seed gives byte-identical files)")
    reader: tuple[str, ...] = option(
        READERS, "memagent (chunked reading, bounded memory) and/or full (the whole prompt, where it fits)",
        aliases=("--readers",),
    )  # fmt: skip
    provider: str = option("local", "LLM back-end: local, openai, scripted")
    model: str | None = option(None, "model name (local default: SmolLM2-135M-Instruct, offline)")
    base_url: str | None = option(None, "OpenAI-compatible server URL (vLLM, SGLang, Ollama, ...)")
    tokenizer: str = option(
        "model",
        "what lengths are counted in: model (the local model's tokenizer, else the offline SmolLM2's), "
        "whitespace (words), or a tokenizer folder",
    )
    context_window: int | None = option(
        None, "full reader: the model's window in tokens (default: the local model's; none for servers)"
    )
    data_path: str | None = option(
        None, "data folder holding paulgraham/ and hotpotqa/ (default: $MEMRL_DATA_DIR, ~/.cache/memrl/data)"
    )
    essays: str | None = option(None, "folder of the essay haystack (default: DATA/paulgraham)")
    hotpotqa: str | None = option(None, "HotpotQA dev file for qa_2 (default: DATA/hotpotqa/...)")
    memagent_option: tuple[str, ...] = option(
        (), "KEY=VALUE settings of MemAgent's reading (chunk_tokens=1500 memory_tokens=256 by default)"
    )
    concurrency: int = option(4, "items answered at once")
    output_dir: str | None = option(None, "where results go (default: runs/ruler)")
    resume: bool = option(False, "continue an interrupted run in OUTPUT_DIR")
    overwrite: bool = option(False, "delete earlier results in OUTPUT_DIR first")
    cache: bool = option(True, "cache deterministic LLM calls on disk (OUTPUT_DIR/llm_cache.sqlite)")

    def __post_init__(self) -> None:
        from memrl.data.ruler import parse_lengths

        split = lambda v: tuple(x.strip() for s in v for x in str(s).split(",") if x.strip())  # noqa: E731
        object.__setattr__(self, "task", split(self.task))
        object.__setattr__(self, "reader", split(self.reader))
        object.__setattr__(self, "lengths", split(self.lengths))
        unknown = [t for t in self.task if t not in RULER_TASKS]
        if unknown:
            raise ConfigError(f"--task {', '.join(unknown)}: unknown; choose from {', '.join(RULER_TASKS)}")
        bad = [r for r in self.reader if r not in READERS]
        if bad or not self.reader:
            raise ConfigError(f"--reader {', '.join(bad) or '(none)'}: choose from {', '.join(READERS)}")
        if any(x.docs for x in parse_lengths(self.lengths)):
            raise ConfigError("--lengths: RULER lengths are tokens (1k, 4k, 128k), not documents")
        if self.resume and self.overwrite:
            raise ConfigError("--resume keeps earlier results and --overwrite deletes them: pass one")
        if self.questions < 1 or self.concurrency < 1:
            raise ConfigError("--questions and --concurrency must be at least 1")
        if self.memagent_option:
            self.memagent_config()  # a bad option fails here

    @property
    def out(self) -> Path:
        return Path(self.output_dir or "runs/ruler")

    def tasks(self) -> tuple[str, ...]:
        return self.task or RULER_TASKS

    def memagent_config(self) -> Any:
        from memrl.agents.memagent import MemAgentConfig
        from memrl.config import parse_options

        return parse_options(MemAgentConfig, self.memagent_option, chunk_tokens=1500, memory_tokens=256)
