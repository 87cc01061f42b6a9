"""What one server process keeps in memory between transactions, and the store consults.

No SQL and no I/O here: the store (jobwire.db) owns the statements and hands these their
facts. turns (whose turn it is among a shared fleet's tenants), row_cache (leased jobs' rows
as last written: guesses that save a read), evidence_limit (late-call evidence rows per job
and minute), limited_queues (the queues seen with limits: a claim locks them first),
job_numbers (a tenant's numbers, handed out from a reserved block). Each is per process:
another process or replica keeps its own.
"""
