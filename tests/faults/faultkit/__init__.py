"""The fault suite's harness: real worker processes against real redis-servers.

Modules:
    scale     scenario sizes for ``ECHOMQ_FAULTS_SCALE`` (``ci`` by default, or ``full``).
    ledger    the record of executions kept outside the server under test (one file, O_APPEND).
    proc      the echomq processor the CLI workers run (``faultkit.proc:process``).
    node_worker.mjs   a BullMQ worker running the same processor, for the Node baseline.
    servers   redis-server processes started per scenario (AOF, maxmemory, ...), with faults.
    managed   restrictions of managed Redis services: commands renamed away, an ACL user.
    workers   a group of worker processes (echomq CLI or Node) that can be killed and restarted.
    producer  adds jobs with custom ids and records every acknowledged add.
    proxy     a TCP proxy that understands RESP, to swallow replies and cut connections.
    audit     the final look at Redis: every job in exactly one state, no locks, one outcome.
    lab       one scenario run: server + workers + producer + ledger, and its result row.
    results   result rows and the Markdown table.

This package is imported by worker subprocesses too (``proc``), so importing it stays cheap:
nothing here imports pytest.
"""
