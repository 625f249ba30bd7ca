"""``memrl serve``: put a memrl LLM back-end behind an OpenAI-compatible HTTP endpoint.

memrl serve --provider local --port 8000      # the offline SmolLM2 at http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an LLM back-end over an OpenAI-compatible HTTP API")
    p.add_argument("--provider", default="local", help="local (default), openai, ...")
    p.add_argument("--model", help="model name or path (local default: SmolLM2-135M-Instruct)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from memrl.llm import create_llm, run_server

    llm = create_llm(args.provider, args.model)
    print(f"serving {llm.name} at http://{args.host}:{args.port}/v1 (Ctrl-C to stop)", flush=True)
    run_server(llm, args.host, args.port)
    return 0
