"""What operators see of a running process: its log lines (`logs`) and traces (`tracing`).

Servers and the worker SDK both use it, so it stands on the standard library and its own
third-party libraries only.
"""
