"""``memrl memory remember``: a conversation in, memories out, through MemBuilder (or raw turns), as a job.

    memrl memory remember --messages conv.json -n alice --db mem.db --llm local        # on a store
    memrl memory remember --messages conv.json -n alice --server http://127.0.0.1:8080 --token SECRET

``conv.json`` is a JSON list of ``{"role", "content", "speaker"?, "timestamp"?}`` (or an object with
``messages`` and an optional ``session_time``; ``-`` reads stdin). On a store the job runs here, with the
model ``--llm`` names (:func:`memrl.agents.jobs.job_writer`); against a server it runs there
(``POST /v1/namespaces/{ns}/remember``, with the server's model). Prints the job's events (``--json``: the
job); exits 1 when the job failed (nothing was applied).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from memrl.errors import ProviderError, ValidationError


def add_parser(mem: argparse._SubParsersAction, common: Any) -> None:
    """Add ``remember`` to the ``memrl memory`` group (``common`` adds --db, --namespace, --json, --embedder)."""
    p = mem.add_parser("remember", help="build memories from a conversation (MemBuilder, or raw turns)")
    p.add_argument("--messages", required=True, metavar="FILE.json", help="the conversation (- for stdin)")
    p.add_argument("--session-time", help="when the conversation took place (ISO date-time)")
    p.add_argument("--builder", choices=["membuilder", "raw"],
                   help="membuilder (the default with --llm) or raw (the turns as said; the default without)")  # fmt: skip
    p.add_argument("--dry-run", action="store_true", help="print the events, change nothing")
    p.add_argument("--idempotency-key", help="a retry with the same key returns the first job")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for the job")
    p.add_argument("--server", help="a memory server's URL (memrl serve memory): the job runs there")
    p.add_argument("--token", default=os.environ.get("MEMRL_TOKEN"), help="bearer token for --server")
    p.add_argument("--llm", default=os.environ.get("MEMRL_LLM", "none"),
                   help="on a store: an OpenAI-compatible URL, a provider name, local (the offline 135M model, "
                   "opt-in: it writes mostly junk), or none (the default: --builder raw)")  # fmt: skip
    p.add_argument(
        "--llm-model", help="model name at --llm (a LoRA's name on vLLM), or the local model's path"
    )
    common(p)
    p.set_defaults(func=remember)


def read_messages(path: str) -> dict[str, Any]:
    """``{"messages": [...], "session_time"?: ...}`` from a JSON file (a list, or an object with them)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        data = json.loads(text)
    except OSError as e:
        raise ValidationError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValidationError(f"{path} is not JSON: {e}") from None
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, dict) or not isinstance(data.get("messages"), list):
        raise ValidationError(f"{path}: expected a list of messages or an object with 'messages'")
    return {k: data[k] for k in ("messages", "session_time") if data.get(k) is not None}


def _on_server(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    import httpx

    headers = {"Authorization": f"Bearer {args.token}"} if args.token else {}
    if args.idempotency_key:
        headers["Idempotency-Key"] = args.idempotency_key
    url = f"{args.server.rstrip('/')}/v1/namespaces/{args.namespace}/remember"
    try:
        r = httpx.post(url, json=body, headers=headers, params={"wait": "true", "timeout": min(args.timeout, 600)},
                       timeout=args.timeout + 30)  # fmt: skip
    except httpx.HTTPError as e:
        raise ProviderError(f"cannot reach {args.server}: {e}") from None
    if r.status_code >= 400:
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = r.text[:500]
        error = ValidationError if r.status_code in (400, 409, 422) else ProviderError
        raise error(f"the server answered {r.status_code}: {message}")
    return r.json()


def _on_store(args: argparse.Namespace, body: dict[str, Any]) -> dict[str, Any]:
    from memrl.agents.jobs import job_writer
    from memrl.memory import Memory

    with Memory(args.db, embedder=args.embedder, writer=job_writer(args.llm, args.llm_model)) as m:
        job = m.remember(
            body["messages"], namespace=args.namespace, session_time=body.get("session_time"),
            builder=args.builder, dry_run=args.dry_run, timeout=args.timeout,
            idempotency_key=args.idempotency_key,
        )  # fmt: skip
        if not job.finished:  # past --timeout: closing the memory cancels it, nothing applied
            job = m.cancel_job(job.id)
        return job.to_dict()


def remember(args: argparse.Namespace) -> int:
    from memrl.tools.jobs import summary

    body = read_messages(args.messages)
    if args.session_time:
        body["session_time"] = args.session_time
    if args.server:
        body.update(agent=args.builder, dry_run=args.dry_run)
        job = _on_server(args, body)
    else:
        job = _on_store(args, body)
    if args.json:
        json.dump(job, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        print(summary(job, follow=f"GET {args.server}/v1/jobs/{{id}}" if args.server else "{id}"))
    return 0 if job["status"] in ("succeeded", "queued", "running") else 1
