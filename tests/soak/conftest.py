"""The soak harness lives beside its test (tests/soak/soak.py); this folder is on the import path."""
