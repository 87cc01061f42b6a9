"""A lease's uploads in the result store: only the newest finished one stays, and an ended
lease's go but the one its Complete kept (jobwire.runtime.result_store)."""

from __future__ import annotations

import json
from pathlib import Path

from jobwire.domain.kept_results import EndedLease
from jobwire.runtime.blocking import Blocking
from jobwire.runtime.result_store import ResultStore, lease_folder

LEASE = EndedLease("acme", "PT-20260101-001", "1.token")


def files(store: ResultStore) -> list[str]:
    root = Path(store.root)
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def uploaded(store: ResultStore, key: str, finished_ns: int | None) -> None:
    """An upload under `key`: finished at `finished_ns` (None: still being written; 0: a sum of
    before uploads kept their finish time)."""
    path = Path(store.path(key))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    if finished_ns is not None:
        summed = {"size_bytes": 1, "sha256": "", "content_type": ""}
        if finished_ns:
            summed["finished_ns"] = finished_ns
        Path(f"{path}.sum").write_text(json.dumps(summed))


def test_the_last_upload_to_finish_is_kept_and_those_being_written_stay(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path / "results"), Blocking(1))
    for upload_id, finished in (("a", 2_000), ("b", 3_000), ("c", None), ("d", 0)):
        uploaded(store, f"lease/{upload_id}", finished)
    assert store.keep_newest_now("lease") == "b"
    assert files(store) == ["lease/b", "lease/b.sum", "lease/c"]
    assert store.keep_newest_now("lease") == "b"  # whoever asks again keeps the same one
    assert store.keep_newest_now("nobody's") is None


def test_an_ended_lease_keeps_only_what_its_complete_named(tmp_path: Path) -> None:
    store = ResultStore(str(tmp_path / "results"), Blocking(1))
    own, fleet = (lease_folder(tenant, LEASE.job_no, LEASE.token) for tenant in ("acme", "*"))
    for key in (f"{own}/named", f"{own}/other", f"{fleet}/fleets", "another-lease/x"):
        uploaded(store, key, 1)
    completed = EndedLease(LEASE.tenant, LEASE.job_no, LEASE.token, kept_key=f"{own}/named")
    assert store.remove_ended_now([completed]) == 4  # other and its sum; the fleet's upload and its sum
    assert files(store) == sorted([f"{own}/named", f"{own}/named.sum", "another-lease/x", "another-lease/x.sum"])
    assert store.remove_ended_now([LEASE]) == 2  # an ending that named none: everything goes
    assert files(store) == ["another-lease/x", "another-lease/x.sum"]
