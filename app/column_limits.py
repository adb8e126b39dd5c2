"""What the tables allow that an entry file can exceed, without the tables themselves.

`pitfalls check` reads these (it must not pay for SQLAlchemy to check a file); app/models.py
builds its columns from them, so the two cannot drift apart.
"""

ENTRY_KINDS = ("error", "warning", "silent", "hang", "perf", "howto")
ENTRY_ID_LENGTH = 100
ENTRY_VERSIONS_LENGTH = 200
SIGNATURE_EXCEPTION_LENGTH = 200
