"""Agent jobs on a namespace: the job table (:mod:`.table`: what was asked, its status, its events) and a
job's changes (:mod:`.changes`: the diff of a scratch clone against the namespace, checked and applied at
once). Imports records and store.
"""

from memrl.memory.jobs.changes import Base, check_deletes, commit, diff, start_scratch
from memrl.memory.jobs.table import Job, JobTable, JobWriter, check_messages, scratch_name

__all__ = [
    "Base", "Job", "JobTable", "JobWriter", "check_deletes", "check_messages", "commit", "diff", "scratch_name",
    "start_scratch",
]  # fmt: skip
