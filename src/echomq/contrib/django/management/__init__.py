"""Management commands of the echomq Django app."""
