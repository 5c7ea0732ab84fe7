"""Defaults shared by the kernel's public calls."""

DEFAULT_MAILBOX_SIZE = 10_000
"""Bounded by default: a flooded actor is visible (``MailboxFull``) rather than a memory leak.
Pass ``mailbox_size=None`` for an unbounded mailbox."""

DEFAULT_ASK_TIMEOUT = 5.0
"""Like OTP's ``gen_server:call``: long enough for real work, short enough to surface a deadlock."""
