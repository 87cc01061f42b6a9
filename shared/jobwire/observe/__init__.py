"""What operators see of a running process: its log lines (`logs`), traces (`tracing`) and
GET /metrics (`metrics`: servers and the gateway).

Servers and the worker SDK both use it, so it stands on the standard library and its own
third-party libraries only.
"""
