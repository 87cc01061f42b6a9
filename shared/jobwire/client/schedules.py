"""JobClient's schedule methods (ScheduleService): jobs submitted from a template on a cron or a period."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import chain

from jobwire.client import convert, views
from jobwire.client.base import BaseClient
from jobwire.client.convert import Seconds
from jobwire.v1 import job_pb2, schedule_pb2, schedule_pb2_grpc


class ScheduleMethods(BaseClient):
    """Create, read, list, pause, resume and delete schedules; mixed into `JobClient`."""

    _schedules: schedule_pb2_grpc.ScheduleServiceStub

    def _bind(self) -> None:
        super()._bind()
        self._schedules = schedule_pb2_grpc.ScheduleServiceStub(self._channel)

    def create_schedule(
        self,
        schedule_id: str,
        template: job_pb2.SubmitRequest,
        *,
        cron: str | None = None,
        every: Seconds | None = None,
        time_zone: str = "",
        overlap: str = "SKIP",
        catch_up: str = "NONE",
    ) -> views.Schedule:
        """Fire `template` (built with `submit_request`, no idempotency key) on a cron or every period.

        Args:
            schedule_id: unique in your tenant.
            template: the job each firing submits, with the key `<schedule_id>@<fire time>`.
            cron: 5 fields (minute hour day month weekday), read in `time_zone`.
            every: a period of at least 1 s, counted from the schedule's creation. Give cron or every.
            time_zone: an IANA name such as `Asia/Shanghai`; empty is UTC.
            overlap: `SKIP` (no firing while the previous job is unfinished) or `ALLOW`.
            catch_up: what a server back after missed firings does: `NONE` or `ONE` job for them.

        Raises:
            InvalidArgumentError: naming the field (`template.<field>` for the template).
            AlreadyExistsError: the id is taken.
        """
        request = schedule_pb2.CreateScheduleRequest(
            schedule_id=schedule_id,
            time_zone=time_zone,
            template=template,
            overlap=schedule_pb2.Schedule.Overlap.Value(overlap.upper()),
            catch_up=schedule_pb2.Schedule.CatchUp.Value(catch_up.upper()),
        )
        if cron is not None:
            request.cron = cron
        if every is not None:
            request.every.CopyFrom(convert.duration(every))
        # Not retried: a create whose reply was lost answers ALREADY_EXISTS when repeated.
        made: schedule_pb2.Schedule = self._unary(
            lambda: self._schedules.CreateSchedule(request, timeout=self.timeout), idempotent=False
        )
        return views.Schedule(made)

    def get_schedule(self, schedule_id: str) -> views.Schedule:
        """The schedule: next and last fire times as datetimes, `overlap` and `catch_up` by name."""
        return self._on_schedule(self._schedules.GetSchedule, schedule_id)

    def pause_schedule(self, schedule_id: str) -> views.Schedule:
        """Stop firing until resumed (idempotent)."""
        return self._on_schedule(self._schedules.PauseSchedule, schedule_id)

    def resume_schedule(self, schedule_id: str) -> views.Schedule:
        """Fire again, from the first fire time after now: those passed while paused are not made up."""
        return self._on_schedule(self._schedules.ResumeSchedule, schedule_id)

    def delete_schedule(self, schedule_id: str) -> None:
        """Remove the schedule; jobs it made stay."""
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        self._unary(lambda: self._schedules.DeleteSchedule(request, timeout=self.timeout), idempotent=False)

    def list_schedules(self, *, page_size: int = 0, limit: int | None = None) -> Iterator[views.Schedule]:
        """Your tenant's schedules, oldest first, across pages, at most `limit` of them."""
        request = schedule_pb2.ListSchedulesRequest(page_size=page_size)
        pages = self._pages(self._schedules.ListSchedules, request)
        return convert.at_most(map(views.Schedule, chain.from_iterable(page.schedules for page in pages)), limit)

    def _on_schedule(self, method: Callable[..., schedule_pb2.Schedule], schedule_id: str) -> views.Schedule:
        request = schedule_pb2.ScheduleRef(schedule_id=schedule_id)
        return views.Schedule(self._unary(lambda: method(request, timeout=self.timeout), idempotent=True))
