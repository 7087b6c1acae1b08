"""``echomq_worker``."""
