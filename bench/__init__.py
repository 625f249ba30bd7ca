"""memrl's benchmarks: each module at this level runs as ``python -m bench.NAME`` from the repository root
and prints one JSON line last; ``bench/README.md`` lists what each measures. Modules named for a benchmark
with a suffix (``store_data``, ``learning_read``, ...) are its parts, imported, not run. One-off research
scripts, whose findings docs/results.md records, are in :mod:`bench.research`. Not part of the installed
``memrl`` package.
"""
