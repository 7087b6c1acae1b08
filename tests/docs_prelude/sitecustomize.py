"""Loaded at start-up by every Python process the docs test starts (``tests/docs_prelude`` is on
their ``PYTHONPATH``): with ``ECHOMQ_DOCS_TEST`` set, it installs :mod:`docs_prelude` (the
placeholders for the user's code and the stop rule for workers that run until stopped).

Any other process is left alone: without the variable this module does nothing.
"""

import os

if os.environ.get("ECHOMQ_DOCS_TEST"):
    import docs_prelude

    docs_prelude.install()
