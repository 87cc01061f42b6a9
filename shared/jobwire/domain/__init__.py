"""Pure rules of jobwire: states and transitions, progress, stage plans, the user view.

Standard library only, so every layer (store, servers, worker runtime) can share them, with
one exception: `schedules` reads cron expressions with croniter, which comes with the server
extra (db). Only server code imports `schedules`; import-linter keeps croniter out of what
fleet workers, clients and the gateway import, since they install without that extra.
"""
