"""Pure rules of jobwire: states and transitions, progress, stage plans, the user view.

Standard library only, so every layer (store, servers, worker runtime) can share them.
"""
