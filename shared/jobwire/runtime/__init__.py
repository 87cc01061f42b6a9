"""The runtime of a server process, apart from gRPC and SQL: what it is made of and how it runs.

settings (JOBWIRE_*), parts (the Runtime a process assembles), serving (its entry, one
process or a family), family (processes on one port), housekeeping (reaper, retention),
leadership (the one process of all replicas that runs housekeeping or the schedule loop),
tail (the one reader of job_event), wakeup (waiting claims), shares (per-tenant capacity),
blocking (the database thread pool).
"""
