"""The job: :class:`Job` (bound to a queue and a connection, its methods act on Redis), the
fields it carries (:class:`JobData`, :class:`ParentRef`) and the states it can be in
(:class:`JobState`).

The model is defined in ``_job_model`` and the async ``Job`` in ``_job`` (the source the sync
``echomq.sync.Job`` is generated from); this module only re-exports them.
"""

from ._job import Job as Job
from ._job_model import JobData as JobData
from ._job_model import JobState as JobState
from ._job_model import ParentRef as ParentRef
from ._job_model import ms_to_datetime as ms_to_datetime
