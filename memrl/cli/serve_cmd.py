"""``memrl serve llm|memory|mcp|reward`` and ``memrl ui``: memrl's servers.

    memrl serve llm --provider local --port 8000        # an LLM behind an OpenAI-compatible API (also: memrl serve --provider local)
    memrl serve memory --db mem.db --port 8080 --token app=SECRET123:alice --runs runs/
    memrl serve mcp --db mem.db --namespace alice                      # MCP over stdio
    memrl serve mcp --db mem.db --namespace alice --transport http --port 8090
    memrl serve reward --port 8765 --token verl=SECRET123 --judge-provider openai --judge-model gpt-4o-mini
    memrl ui --db mem.db --runs runs/                                  # the web browser, opened in a browser

Tokens: ``--token NAME=SECRET:ns1,ns2`` (repeatable; ``:*`` = every namespace) or ``--tokens-file``; also
``$MEMRL_TOKENS`` (space-separated specs). Without any token a server listens on loopback only.
"""

from __future__ import annotations

import argparse
import os
import sys

from memrl.errors import ConfigError

SUBCOMMANDS = ("llm", "memory", "mcp", "reward")


def _auth(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--token", action="append", default=[], metavar="NAME=SECRET:NS,..",
                   help="a bearer token and the namespaces it may touch (repeatable; :* = all)")  # fmt: skip
    p.add_argument("--tokens-file", help='JSON: {"name": {"token": "...", "namespaces": ["alice"]}}')
    p.add_argument("--allowed-origin", action="append", default=[], metavar="SCHEME://HOST[:PORT]",
                   help="another web origin allowed to send state-changing requests, and its host name "
                   "(repeatable; by default only the server's own origin, on --host or a loopback name)")  # fmt: skip
    p.add_argument("--max-body-bytes", type=int, default=1_000_000, help="larger request bodies get 413")
    p.add_argument("--max-import-bytes", type=int, default=1 << 30,
                   help="largest import body (JSONL, validated as it streams and spooled to disk)")  # fmt: skip
    p.add_argument(
        "--max-concurrency", type=int, default=32, help="requests handled at once; others wait, then 503"
    )
    p.add_argument("--max-inflight-per-token", type=int, default=16,
                   help="requests of one token handled at once; past it 429 (a tenant cannot take every place)")  # fmt: skip
    p.add_argument("--max-waits-per-token", type=int, default=8,
                   help="long polls (?wait=true) of one token at once; past it 429 (a wait holds no thread)")  # fmt: skip
    p.add_argument("--store-workers", type=int, default=8,
                   help="threads doing store and search work off the event loop (one token uses half at most)")  # fmt: skip
    p.add_argument("--store-timeout", type=float, default=30.0,
                   help="seconds a request waits for its store work before 503 with Retry-After")  # fmt: skip
    p.add_argument("--max-as-of-changes", type=int, default=100_000,
                   help="history entries one as_of search may replay; past it 422")  # fmt: skip


def _store(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--db",
        default=os.environ.get("MEMRL_DB", "memrl.db"),
        help="memory store: a SQLite file or a postgresql:// URL (docs/postgres.md)",
    )
    p.add_argument("--embedder", default=os.environ.get("MEMRL_EMBEDDER", "minilm"),
                   help="minilm (default, offline), hashing[:DIM], openai:MODEL")  # fmt: skip
    p.add_argument("--busy-timeout", type=float, default=5.0,
                   help="seconds a store call waits for a lock another writer holds (then 503 with Retry-After)")  # fmt: skip


def _agents(p: argparse.ArgumentParser) -> None:
    p.add_argument("--llm", default=os.environ.get("MEMRL_LLM", "none"),
                   help="the model behind the agent jobs (remember, maintain, read): an OpenAI-compatible base URL "
                   "(vLLM/SGLang serving a checkpoint of memrl train or verl), a provider name (openai, ...), "
                   "local (the offline 135M model: opt-in, it writes mostly junk), or none (the default: remember "
                   "stores the turns with agent=raw)")  # fmt: skip
    p.add_argument(
        "--llm-model", help="model name at --llm (a LoRA's name on vLLM), or the local model's path"
    )
    p.add_argument("--destruction-budget", "--max-delete-share", type=float, default=0.5, dest="destruction_budget",
                   help="the most of a namespace's content one job may take away (deleted memories whole, words "
                   "lost by updates and merges) without allow_mass_delete; --max-delete-share is its old name")  # fmt: skip
    p.add_argument(
        "--max-queued-jobs", type=int, default=16, help="jobs one namespace may have queued (more: 429)"
    )
    p.add_argument("--max-queued-bytes", type=int, default=8_000_000,
                   help="bytes of job requests one namespace may have queued (more: 429)")  # fmt: skip
    p.add_argument("--max-queued-jobs-per-token", type=int, default=32,
                   help="jobs one token may have queued in this process (more: 429)")  # fmt: skip
    p.add_argument("--max-queued-bytes-per-token", type=int, default=16_000_000,
                   help="bytes of job requests one token may have queued in this process (more: 429)")  # fmt: skip
    p.add_argument("--commit-wait", type=float, default=30.0,
                   help="seconds a job retries a step that finds the store busy (its commit too), then fails")  # fmt: skip


def _writer(args: argparse.Namespace):  # -> JobRunner
    """The runner of the agent jobs (``AsyncMemory(..., writer=)``), with the model ``--llm`` names."""
    from memrl.agents.jobs import JobConfig, job_writer

    config = JobConfig(
        destruction_budget=args.destruction_budget, max_queued_jobs=args.max_queued_jobs,
        max_queued_bytes=args.max_queued_bytes, max_queued_jobs_per_client=args.max_queued_jobs_per_token,
        max_queued_bytes_per_client=args.max_queued_bytes_per_token, commit_wait=args.commit_wait,
    )  # fmt: skip
    return job_writer(args.llm, args.llm_model, config)


def register(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="run a server: llm (default), memory, mcp or reward")
    group = serve.add_subparsers(dest="server", metavar="SERVER")
    group.required = True

    p = group.add_parser("llm", help="an LLM back-end behind an OpenAI-compatible HTTP API")
    p.add_argument("--provider", default="local", help="local (default), openai, ...")
    p.add_argument("--model", help="model name or path (local default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--embedder",
        help="also serve POST /v1/embeddings with this embedder (hashing[:DIM] is deterministic, minilm, ...)",
    )
    p.set_defaults(func=_serve_llm)

    p = group.add_parser("memory", help="the memory REST API and web browser")
    _store(p)
    _auth(p)
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--runs", action="append", default=[], help="folder with memrl eval/train outputs (repeatable)"
    )
    p.add_argument("--no-ui", action="store_true", help="serve the API only")
    p.add_argument("--no-access-log", action="store_true",
                   help="no JSON line per request and per job on stderr (docs/observability.md)")  # fmt: skip
    p.add_argument("--no-metrics", action="store_true", help="no counting for GET /metrics (it answers 501)")
    _agents(p)
    p.set_defaults(func=_serve_memory)

    p = group.add_parser("mcp", help="the memory tools over MCP (stdio or streamable HTTP)")
    _store(p)
    _auth(p)
    p.add_argument("--namespace", "-n", default="default", help="the namespace the tools act on")
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    p.add_argument("--port", type=int, default=8090, help="for --transport http (path /mcp)")
    _agents(p)
    p.set_defaults(func=_serve_mcp)

    p = group.add_parser("reward", help="batch scoring with memrl's reward and metric functions")
    _auth(p)
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--judge-provider", help="LLM back-end for the 'judge' metric (openai, local, ...)")
    p.add_argument("--judge-model", help="model for the judge")
    p.add_argument("--judge-base-url", help="OpenAI-compatible base URL for the judge")
    p.add_argument("--max-batch", type=int, default=256, help="most items in one scoring request")
    p.set_defaults(func=_serve_reward)

    p = sub.add_parser("ui", help="open the web memory browser on a store file")
    _store(p)
    p.add_argument(
        "--runs", action="append", default=[], help="folder with memrl eval/train outputs (repeatable)"
    )
    p.add_argument("--port", type=int, default=0, help="port (default: any free one)")
    p.add_argument("--no-open", action="store_true", help="print the address instead of opening a browser")
    p.set_defaults(func=_ui)


def legacy_argv(argv: list[str]) -> list[str]:
    """``memrl serve --provider local`` (the form before the group) means ``memrl serve llm ...``."""
    if argv[:1] == ["serve"] and (len(argv) == 1 or argv[1] not in (*SUBCOMMANDS, "-h", "--help")):
        return ["serve", "llm", *argv[1:]]
    return argv


def _tokens(args: argparse.Namespace):  # -> Tokens
    from memrl.server.http import Tokens, is_loopback

    specs = list(args.token) + os.environ.get("MEMRL_TOKENS", "").split()
    tokens = Tokens.parse(specs, args.tokens_file)
    if not tokens.enabled and not is_loopback(args.host):
        raise ConfigError(f"--host {args.host} is not loopback: give at least one --token (or --tokens-file)")
    return tokens


def _policy(args: argparse.Namespace):  # -> Policy
    from memrl.server.guard import Policy

    try:
        return Policy.for_server(args.host, args.allowed_origin)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def _limits(args: argparse.Namespace):  # -> Limits
    from memrl.server.http import Limits

    for flag in ("max_body_bytes", "max_concurrency", "max_inflight_per_token", "max_waits_per_token",
                 "store_workers", "max_as_of_changes"):  # fmt: skip
        if getattr(args, flag) < 1:
            raise ConfigError(f"--{flag.replace('_', '-')} must be at least 1")
    if args.store_timeout <= 0:
        raise ConfigError("--store-timeout must be above 0")
    return Limits(
        max_body_bytes=args.max_body_bytes, max_concurrency=args.max_concurrency,
        max_import_bytes=getattr(args, "max_import_bytes", 1 << 30),
        max_inflight_per_token=args.max_inflight_per_token, max_waits_per_token=args.max_waits_per_token,
        store_workers=args.store_workers, store_timeout=args.store_timeout, max_as_of_changes=args.max_as_of_changes,
    )  # fmt: skip


def _shown(db: str) -> str:
    """The store as the start banner shows it: a Postgres URL without its password (from --db or $MEMRL_DB)."""
    from memrl.memory.backends import redact

    return redact(db) if db.startswith(("postgresql://", "postgres://")) else db


def _need(extra: str, module: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ConfigError(f"this server needs the '{extra}' extra: pip install 'memrl[{extra}]'")


def _serve_llm(args: argparse.Namespace) -> int:
    from memrl.llm import create_llm, run_server

    llm = create_llm(args.provider, args.model)
    embed = None
    if args.embedder:
        from memrl.memory.embedders import create_embedder

        embedder = create_embedder(args.embedder)
        embed = embedder.embed
    print(f"serving {llm.name} at http://{args.host}:{args.port}/v1 (Ctrl-C to stop)", flush=True)
    run_server(llm, args.host, args.port, embed=embed)
    return 0


def _agents_note(memory) -> str:
    """The banner's line about the agent jobs: which model writes, or that none does (raw)."""
    from memrl.agents.jobs import describe_writer

    return describe_writer(memory.writer)


def _embedder_note(memory) -> str:
    """The banner's line about the embedder when it has a model to load (it loads as the server starts)."""
    if memory.embedder.loaded:
        return ""
    return (f"loading the embedding model ({memory.embedder.name}) in the background: /health says "
            "'loading' until it is ready, and requests that embed wait for it")  # fmt: skip


def _run(app, host: str, port: int, what: str, *, open_browser: bool = False, note: str = "") -> int:
    """Serve ``app`` until Ctrl-C; prints the address actually bound (``--port 0`` picks a free one), then
    ``note``."""
    import time

    from memrl.server.http import ServerThread

    with ServerThread(app, host, port) as server:
        print(f"serving {what} at {server.base_url} (Ctrl-C to stop)", flush=True)
        if note:
            print(note, flush=True)
        if open_browser:
            import webbrowser

            webbrowser.open(server.base_url + "/")
        try:
            while server.thread.is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            print("stopped", file=sys.stderr)
    return 0


def _serve_memory(args: argparse.Namespace) -> int:
    _need("serve", "fastapi")
    from memrl import telemetry
    from memrl.memory import AsyncMemory
    from memrl.server.memory_api import create_app
    from memrl.server.observe import ObserveConfig

    tokens, limits = _tokens(args), _limits(args)
    telemetry.configure_from_env()  # traces when OTEL_TRACES_EXPORTER / OTEL_EXPORTER_OTLP_ENDPOINT say so
    observe = ObserveConfig(access_log=not args.no_access_log, metrics=not args.no_metrics)
    memory = AsyncMemory(
        args.db, embedder=args.embedder, writer=_writer(args), busy_timeout=args.busy_timeout
    )
    app = create_app(
        memory, tokens, limits, runs=args.runs, ui=not args.no_ui, policy=_policy(args), jobs=memory.writer,
        observe=observe,
    )  # fmt: skip
    note = "\n".join(n for n in (_agents_note(memory), _embedder_note(memory)) if n)
    return _run(app, args.host, args.port, f"the memory API for {_shown(args.db)}", note=note)


def _serve_mcp(args: argparse.Namespace) -> int:
    _need("mcp", "mcp")
    from memrl.memory import AsyncMemory
    from memrl.server.mcp_server import create_mcp, http_app

    memory = AsyncMemory(
        args.db, embedder=args.embedder, writer=_writer(args), busy_timeout=args.busy_timeout
    )
    if args.transport == "stdio":
        print(_agents_note(memory), file=sys.stderr, flush=True)  # stdout is the transport
        server = create_mcp(memory, args.namespace)
        server.memrl_load.start()  # the model loads while the client connects
        server.run("stdio")
        return 0
    from memrl.server.offload import StoreGate

    tokens, limits = _tokens(args), _limits(args)
    memory.max_as_of_changes = limits.max_as_of_changes
    server = create_mcp(memory, args.namespace, gate=StoreGate(limits.store_workers, limits.store_timeout))
    return _run(
        http_app(server, tokens, args.namespace, limits, policy=_policy(args)),
        args.host,
        args.port,
        f"MCP ({args.namespace}) on /mcp",
        note=_agents_note(memory),
    )


def _serve_reward(args: argparse.Namespace) -> int:
    _need("serve", "fastapi")
    from memrl.server.reward_api import create_reward_app

    judge = None
    if args.judge_provider:
        from memrl.llm import create_llm

        kw = {"base_url": args.judge_base_url} if args.judge_base_url else {}
        judge = create_llm(args.judge_provider, args.judge_model, **kw)
    app = create_reward_app(
        _tokens(args), _limits(args), judge=judge, max_batch=args.max_batch, policy=_policy(args)
    )
    return _run(app, args.host, args.port, "the reward server")


def _ui(args: argparse.Namespace) -> int:
    _need("serve", "fastapi")
    from memrl.memory import AsyncMemory
    from memrl.server.memory_api import create_app
    from memrl.server.observe import ObserveConfig

    memory = AsyncMemory(args.db, embedder=args.embedder)
    # a browser on one's own machine: no JSON line per page in the terminal
    app = create_app(memory, runs=args.runs, observe=ObserveConfig(access_log=False))
    return _run(
        app,
        "127.0.0.1",
        args.port,
        f"the memory browser for {_shown(args.db)}",
        open_browser=not args.no_open,
        note=_embedder_note(memory),
    )
