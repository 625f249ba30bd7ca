"""Agent jobs on a namespace: the job table (:mod:`.table`: what was asked, its status, its events), a
job's changes (:mod:`.changes`: the diff of a scratch clone against the namespace, checked and applied at
once) and the destruction budget those changes are measured against (:mod:`.budget`). Imports records and
store.
"""

from memrl.memory.jobs.budget import Destruction, measure
from memrl.memory.jobs.budget import check as check_destruction
from memrl.memory.jobs.changes import Base, commit, diff, start_scratch
from memrl.memory.jobs.table import (
    Job,
    JobTable,
    JobWriter,
    QueueLimits,
    canonical,
    check_messages,
    request_hash,
    scratch_name,
)

__all__ = [
    "Base", "Destruction", "Job", "JobTable", "JobWriter", "QueueLimits", "canonical", "check_destruction", "check_messages",
    "commit", "diff", "measure", "request_hash", "scratch_name", "start_scratch",
]  # fmt: skip
