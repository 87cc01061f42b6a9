"""gRPC plumbing both services share, and no database code.

server (one gRPC server host) and serve (running it until a signal), handlers (what every
RPC goes through: auth, error mapping, counting), auth (bearer tokens per service role),
errors (JobwireError -> canonical status), metrics and job_metrics (GET /metrics), batching
(group commit), convert and operations (proto <-> domain).
"""
