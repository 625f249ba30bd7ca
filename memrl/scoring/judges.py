"""Judges by name: the published LoCoMo and LongMemEval judge prompts, verbatim, and memrl's strict one.

    spec = get_judge("longmemeval")            # or "mem0", "membuilder", "strict"
    spec.messages(question, gold, prediction, question_type="temporal-reasoning")   # what is sent
    spec.describe()                            # name, source, license, template sha256 (every report has it)

The published templates ship as data files (``memrl/resources/judges/*.json``, their source and license
beside them in that folder's README) and are sent exactly as the original scripts send them:

- ``longmemeval``: LongMemEval's ``get_anscheck_prompt`` (one template per question type; an ``_abs``
  question uses the abstention template whatever its type), one user message
  ``template.format(question, answer, response)``, temperature 0, ``max_tokens`` 10, and the verdict is
  ``'yes' in reply.lower()``, as the official ``evaluate_qa.py`` counts it: every reply is a verdict.
- ``mem0`` (behind mem0's published LoCoMo J scores) and ``membuilder`` (mem0's with rules for "Not
  answerable"): one user message ``ACCURACY_PROMPT.format(question=, gold_answer=, generated_answer=)``,
  temperature 0, ``response_format`` ``json_object``; ``label == "CORRECT"`` -> right, any other label ->
  wrong. A reply that is not JSON with a ``label`` crashes mem0's script; here it is a judge failure
  (excluded and counted in memrl's mode, wrong in the official one: :mod:`memrl.eval.qa.aggregate`).
  mem0's script sets no ``max_tokens``; memrl sends :data:`LABEL_MAX_TOKENS`, which a one-sentence
  verdict never reaches. A question with no answer (LoCoMo category 5) is shown with the gold answer
  ``Not answerable``, as MemBuilder scores it.
- ``strict``: memrl's own prompt (a system message with a rule per question type, a JSON verdict with
  its reasoning under a schema, ``max_tokens`` 200); a reply that does not parse is a judge failure.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal

from memrl.errors import ConfigError
from memrl.llm.base import JSON_OBJECT, Message
from memrl.llm.parsing import extract_json

JUDGE_NAMES: tuple[str, ...] = ("longmemeval", "mem0", "membuilder", "strict")

#: ``max_tokens`` memrl sends with the mem0 / MemBuilder prompts (their scripts send none).
LABEL_MAX_TOKENS = 256

#: The gold answer LoCoMo's category-5 questions are judged against by the published LoCoMo judges.
PUBLISHED_NOT_ANSWERABLE = "Not answerable"

STRICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": {"type": "string", "maxLength": 400},
        "label": {"enum": ["CORRECT", "WRONG"]},
    },
    "required": ["reasoning", "label"],
    "additionalProperties": False,
}

#: memrl's strict judge: the system prompt is ``base`` + the question type's rule + ``output``.
STRICT_TEMPLATES: dict[str, str] = {
    "base": "You grade answers to questions about a long conversation. You get the question, the gold answer "
    "and a model's answer. The model's answer is CORRECT if it gives the same information as the gold "
    "answer, even if worded differently, shorter or longer, as long as it does not contradict it or add a "
    "wrong alternative. It is WRONG if it misses the point of the gold answer, gives only part of it, or "
    "says something different.",
    "temporal": " For dates, accept the same date written in another format, but not another date. For a "
    "count of days, weeks or months, an answer off by one is still CORRECT.",
    "knowledge-update": " The facts changed over time: the answer is CORRECT if it gives the latest value "
    "in the gold answer, even if it also mentions earlier values.",
    "single-session-preference": " Instead of a gold answer you get a rubric of the user's preferences: the "
    "answer is CORRECT if it recalls and uses the user's personal information the rubric names.",
    "abstention": " The question cannot be answered from the conversation: the answer is CORRECT only if it "
    "says the information is not available or incomplete (and WRONG if it invents an answer).",
    "output": ' Reply with JSON only: {"reasoning": "<one sentence>", "label": "CORRECT" or "WRONG"}.',
}
_STRICT_RULE = {
    "temporal": "temporal",
    "temporal-reasoning": "temporal",
    "knowledge-update": "knowledge-update",
    "single-session-preference": "single-session-preference",
    "abstention": "abstention",
    "adversarial": "abstention",
}

_LONGMEMEVAL_TYPES = ("single-session-user", "single-session-assistant", "multi-session", "temporal-reasoning",
                      "knowledge-update", "single-session-preference")  # fmt: skip


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class JudgeSpec:
    """One judge: its templates, how they are sent, how a reply becomes a verdict, where they come from."""

    name: str
    convention: Literal["yes_no", "label_json", "strict"]
    templates: dict[str, str]
    source: str
    license: str
    how_used: str
    file: str | None = None
    file_sha256: str | None = None
    published_model: str | None = None  # the judge model of the published scores

    @property
    def template_sha256(self) -> str:
        """sha256 of the template (UTF-8); several templates: of their JSON, keys sorted."""
        if len(self.templates) == 1:
            return sha256_text(next(iter(self.templates.values())))
        return sha256_text(json.dumps(self.templates, sort_keys=True, ensure_ascii=False))

    @property
    def max_tokens(self) -> int:
        return {"yes_no": 10, "label_json": LABEL_MAX_TOKENS, "strict": 200}[self.convention]

    @property
    def json_schema(self) -> dict[str, Any] | None:
        return {"yes_no": None, "label_json": JSON_OBJECT, "strict": STRICT_SCHEMA}[self.convention]

    def template_key(self, question_type: str | None, abstention: bool = False) -> str:
        """Which template judges this question (LongMemEval: per type, ``_abstention`` for ``_abs``)."""
        if self.convention == "yes_no":
            if abstention:
                return "_abstention"
            if question_type not in _LONGMEMEVAL_TYPES:
                raise ConfigError(
                    f"the longmemeval judge has templates for LongMemEval's question types only "
                    f"({', '.join(_LONGMEMEVAL_TYPES)}), not {question_type!r}: use --judge mem0, membuilder "
                    "or strict"
                )
            return question_type
        if self.convention == "strict":
            return "abstention" if abstention else _STRICT_RULE.get(question_type or "", "base")
        return "template"

    def messages(
        self, question: str, gold: str, prediction: str, *, question_type: str | None = None,
        abstention: bool = False,
    ) -> list[Message]:  # fmt: skip
        """The messages sent to the judge model, exactly."""
        key = self.template_key(question_type, abstention)
        if self.convention == "yes_no":
            return [{"role": "user", "content": self.templates[key].format(question, gold, prediction)}]
        if self.convention == "label_json":
            text = self.templates[key].format(
                question=question, gold_answer=gold, generated_answer=prediction
            )
            return [{"role": "user", "content": text}]
        rule = "" if key == "base" else self.templates[key]
        system = self.templates["base"] + rule + self.templates["output"]
        shown = "Rubric" if key == "single-session-preference" else "Gold answer"
        user = f"Question: {question}\n{shown}: {gold}\nModel answer: {prediction}"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def verdict(self, text: str) -> tuple[bool, str]:
        """``(correct, reasoning)`` from a reply; ``ValueError`` when the reply is no verdict (never for
        ``yes_no``: the official count makes every reply one)."""
        if self.convention == "yes_no":
            return "yes" in text.lower(), ""
        if self.convention == "label_json":
            data = json.loads(text)  # as mem0's script reads it: the reply must be the JSON object
            if not isinstance(data, dict) or "label" not in data:
                raise ValueError("no 'label' in the reply")
            return data["label"] == "CORRECT", ""
        data = extract_json(text)  # a fenced or prefixed verdict is still a verdict
        label = data["label"] if isinstance(data, dict) else None
        if label not in ("CORRECT", "WRONG"):
            raise ValueError(f"label {label!r}")
        return label == "CORRECT", str(data.get("reasoning", ""))

    def gold_for(self, gold: str, answerable: bool) -> str:
        """The gold answer shown: LoCoMo's published judges see ``Not answerable`` for category 5."""
        if not answerable and self.convention == "label_json":
            return PUBLISHED_NOT_ANSWERABLE
        return gold

    def describe(self) -> dict[str, Any]:
        """What every report records about its judge (the model is added by the run)."""
        return {
            "name": self.name, "convention": self.convention, "template_sha256": self.template_sha256,
            "file": self.file, "file_sha256": self.file_sha256, "source": self.source, "license": self.license,
            "max_tokens": self.max_tokens, "published_model": self.published_model,
        }  # fmt: skip


_FILES = {
    "longmemeval": ("longmemeval_official.json", "yes_no", "gpt-4o-2024-08-06"),
    "mem0": ("locomo_mem0_accuracy.json", "label_json", "gpt-4o-mini"),
    "membuilder": ("locomo_membuilder_accuracy.json", "label_json", "gpt-4.1"),
}


@functools.cache
def get_judge(name: str) -> JudgeSpec:
    """The judge called ``name`` (one of :data:`JUDGE_NAMES`)."""
    if name == "strict":
        return JudgeSpec("strict", "strict", dict(STRICT_TEMPLATES), source="memrl (memrl.scoring.judges)",
                         license="Apache-2.0", how_used="system + user message, JSON verdict under a schema, "
                         "temperature 0, max_tokens 200; an unparsable reply is a judge failure")  # fmt: skip
    if name not in _FILES:
        raise ConfigError(f"unknown judge {name!r}; choose one of {', '.join(JUDGE_NAMES)}")
    filename, convention, model = _FILES[name]
    raw = (files("memrl") / "resources" / "judges" / filename).read_bytes()
    data = json.loads(raw)
    templates = data["templates"] if "templates" in data else {"template": data["template"]}
    return JudgeSpec(name, convention, templates, source=data["source"], license=data["license"],  # type: ignore[arg-type]
                     how_used=data["how_used"], file=f"memrl/resources/judges/{filename}",
                     file_sha256=hashlib.sha256(raw).hexdigest(), published_model=model)  # fmt: skip


def default_judge(dataset: str) -> str:
    """``--judge auto``: LongMemEval's official judge on LongMemEval, memrl's strict judge elsewhere."""
    return "longmemeval" if dataset == "longmemeval" else "strict"
