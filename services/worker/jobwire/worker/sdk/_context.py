"""The handler's view of its job (`JobContext`), over the attempt state the runtime shares
with it (jobwire.worker.sdk._attempt)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from jobwire.domain.review import Review, review_request
from jobwire.domain.stages import StageDef
from jobwire.worker.sdk._attempt import AttemptState
from jobwire.worker.sdk._errors import (
    AwaitingReview,
    InputInvalid,
)


class JobContext:
    """What a handler knows and can say about the job it runs.

    Thread-safe: call it from the handler's thread, from threads it starts, or from the
    event loop for `async def` handlers. Only `check()`, `sleep()` and `asleep()` raise a
    stop signal; progress calls never block on the network.

    In an `async def` handler a stop (cancel, lost lease, time out, shutdown) also cancels the
    handler's task, so any `await` may end it with `asyncio.CancelledError`; the runtime
    ends the attempt for the stop's reason. Clean up in `finally`, and let it propagate.
    """

    def __init__(self, state: AttemptState) -> None:
        self._state = state

    @property
    def job_no(self) -> str:
        """The job number, e.g. ``PT-20261008-001``."""
        return self._state.info.job_no

    @property
    def job_type(self) -> str:
        return self._state.info.job_type

    @property
    def tenant(self) -> str:
        """Whose job this is: the tenant that submitted it (a shared fleet serves several)."""
        return self._state.info.tenant

    @property
    def payload(self) -> bytes:
        """The payload as submitted."""
        return self._state.info.payload

    @property
    def attempt(self) -> int:
        """This attempt's number, counting from 1."""
        return self._state.info.attempt

    @property
    def last_checkpoint(self) -> bytes | None:
        """The checkpoint an earlier attempt saved, or None; fixed for this attempt."""
        return self._state.info.last_checkpoint

    @property
    def stages(self) -> Sequence[StageDef]:
        """The stage plan this job runs through."""
        return self._state.info.stages

    @property
    def current_stage(self) -> str:
        return self._state.stage

    @property
    def tmp_dir(self) -> Path:
        """A private folder for this attempt; removed by the runtime when the attempt ends."""
        return self._state.info.tmp_dir

    @property
    def deadline(self) -> datetime | None:
        """When this attempt's time runs out (aware, UTC), or None when it has no limit.

        Past it the runtime stops the handler at its next safe point (`check()` raises
        TimedOut) and delivers nothing: the server ends the attempt and decides whether it
        runs again.
        """
        return self._state.info.deadline

    @property
    def stop_requested(self) -> bool:
        """True once the job should stop; `check()` then raises the reason."""
        return self._state.stop is not None

    def json(self) -> Any:
        """The payload decoded as JSON; an empty payload reads as ``{}``.

        Raises:
            InputInvalid: The payload is not valid JSON.
        """
        if not self.payload.strip():
            return {}
        try:
            return json.loads(self.payload)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputInvalid(f"the payload is not valid JSON: {exc}") from exc

    def stage(self, code: str) -> None:
        """Enter stage `code` of the plan; reported at once. Stages never go back.

        Raises:
            UndeclaredStage: The job type's plan has no such stage (declare it:
                ``@handlers.job("x", stages=[...])``).
            ProgressRegression: `code` is behind the current stage.
        """
        self._state.enter_stage(code)

    def progress(self, processed: int, total: int | None = None) -> None:
        """Report units done in the current stage; give `total` only when truly known.

        Reports are coalesced (at most one per 250 ms within a stage, the latest always
        sent), so calling this for every unit is fine.
        """
        self._state.report(processed, total)

    def checkpoint(self, data: bytes) -> None:
        """Save where a later attempt may resume (at most 64 KiB); sent with the next report."""
        self._state.save_checkpoint(data)

    def record(self, key: str, value: str) -> None:
        """Leave evidence for operators: `ctx.record("payment_request_id", "pi_3Nx...")`.

        The entry joins this attempt's trail with its stage and time (AdminService.ListEvents,
        the evidence page); the job's user never sees it. Entries are sent with the next
        reports, and before the attempt ends.

        Args:
            key: A name, [A-Za-z0-9][A-Za-z0-9_.:-]{0,63}.
            value: Plain text, at most 1000 characters, no control characters.

        Raises:
            InvalidArgument: A key or value past those rules (nothing is sent).
            EvidenceLimitReached: This attempt has recorded 200 entries already.
        """
        self._state.record(key, value)

    @property
    def review(self) -> Review | None:
        """The reviewer's decision (APPROVE), note and name when this job was approved after
        an `await_review`; None when nobody reviewed it."""
        return self._state.info.review

    def await_review(self, assignee: str, items: Sequence[str] = (), checkpoint: bytes | None = None) -> NoReturn:
        """Hand the job to a person and end this attempt: raises AwaitingReview, which the
        handler lets propagate (as it would a stop).

        The job then WAITs with no lease and no attempt clock. If the reviewer approves, a
        later attempt runs with `review` set and `last_checkpoint` as saved here (or by the
        last `checkpoint()`); if they reject it, the job ends FAILED with their note.

        Args:
            assignee: Who must review it (a name, at most 128 characters).
            items: What they should look at: at most 50 lines of plain text, 500 characters each.
            checkpoint: Where the next attempt resumes (at most 64 KiB).

        Raises:
            InvalidArgument: A missing assignee, or items past the limits (nothing is sent).
        """
        request = review_request(assignee, tuple(items))
        if checkpoint is not None:
            self._state.save_checkpoint(checkpoint)
        raise AwaitingReview(request)

    def check(self) -> None:
        """A safe point: return, or raise JobCancelled, LeaseLost, ShuttingDown or TimedOut.

        Call it where stopping leaves nothing half-done, e.g. between batches.
        """
        self._state.check()

    def sleep(self, seconds: float) -> None:
        """Sleep in a sync handler, waking early to stop; a safe point like `check()`.

        Raises:
            TypeError: Called on an event loop (an `async def` handler): use `asleep`.
        """
        self._state.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        """Sleep in an async handler, waking early to stop; a safe point like `check()`."""
        await self._state.asleep(seconds)
