"""One-off research scripts: each answered one question at one time (docs/results.md or docs/rewards.md
records what it found); kept so the figure can be reproduced, ``python -m bench.research.NAME`` from the
repository root. Not maintained as benchmarks: ``bench/README.md`` says what each asked.
"""
