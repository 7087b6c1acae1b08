"""The BullMQ 6 wire protocol: key names, hash fields, option codes and script return codes.

Everything in this package is a fact of the protocol written down in ``docs/protocol/`` (index:
docs/protocol/README.md); nothing
here does I/O. It is internal: the public API never exposes these names.
"""
