"""The jobs page's search: the filters a URL carries, and where its pages go back and forth.

One `JobQuery` is read from the page's address and sent as ListJobs' filters; the page's
live stream reads the same address, so the new jobs it shows are the ones a reload would.
ListJobs' page tokens only go forward; going back, the address carries the tokens of the
pages before (`back`, oldest first, "" for the first page), a few dozen bytes a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from jobwire.client.convert import status_name, status_value
from jobwire.v1 import job_pb2

PAGE_SIZE = 50
_FIELDS = ("job_no", "status", "job_type", "queue", "owner", "label", "batch_id")


@dataclass(frozen=True)
class JobQuery:
    """What `/jobs?…` asks for; every field empty is every job, newest first."""

    job_no: str = ""  # exact: the one job of that number, or none
    status: str = ""  # a status name; the form sends RUNNING, a typed Processing or 正在处理 works too
    job_type: str = ""
    queue: str = ""
    owner: str = ""
    label: str = ""  # key=value
    batch_id: str = ""

    @classmethod
    def of(cls, params: QueryParams) -> JobQuery:
        values = {name: params.get(name, "").strip() for name in _FIELDS}
        try:
            values["status"] = status_name(status_value(values["status"])) if values["status"] else ""
        except ValueError:
            values["status"] = ""  # a status nobody has: every status, as the form's "All"
        return cls(**values)

    @property
    def statuses(self) -> list[int]:
        return [job_pb2.Job.Status.Value(self.status)] if self.status else []

    @property
    def labels(self) -> dict[str, str]:
        key, _, value = self.label.partition("=")
        return {key.strip(): value.strip()} if key.strip() else {}

    def request(self, *, page_size: int, page_token: str, locale: str) -> job_pb2.ListJobsRequest:
        return job_pb2.ListJobsRequest(
            statuses=self.statuses,  # type: ignore[arg-type]
            job_type=self.job_type,
            queue=self.queue,
            owner=self.owner,
            labels=self.labels,
            batch_id=self.batch_id,
            page_size=page_size,
            page_token=page_token,
            locale=locale,
        )

    def pairs(self) -> list[tuple[str, str]]:
        """The query's fields that are set, for an address."""
        return [(name, getattr(self, name)) for name in _FIELDS if getattr(self, name)]


@dataclass(frozen=True)
class Paging:
    """Where this page of the list is (`token`: ListJobs' page token, "" for the first) and the pages before."""

    token: str = ""
    back: tuple[str, ...] = ()

    @classmethod
    def of(cls, params: QueryParams) -> Paging:
        token = params.get("page", "")
        back = tuple(params.get("back", "").split(",")) if token else ()
        return cls(token, back)

    @property
    def first(self) -> bool:
        return not self.token

    def next_href(self, query: JobQuery, next_token: str, path: str = "/jobs") -> str:
        return _href(path, query, next_token, (*self.back, self.token))

    def previous_href(self, query: JobQuery, path: str = "/jobs") -> str:
        return _href(path, query, self.back[-1], self.back[:-1]) if self.back else ""


def _href(path: str, query: JobQuery, token: str, back: tuple[str, ...]) -> str:
    pairs = query.pairs()
    if token:
        pairs += [("page", token), ("back", ",".join(back))]
    return f"{path}?{urlencode(pairs)}" if pairs else path
