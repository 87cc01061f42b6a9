"""The console's schedules pages: each schedule's timing, time zone, next and last firing and
skipped firings; one schedule's jobs, latest first; pause, resume and delete (CSRF), for a
client token and for an operator's admin token alike."""

from __future__ import annotations

import re

import pytest
import sqlalchemy as sa
from auth_files import Token
from console_support import CLIENT, OPERATOR, ZH, csrf
from gateway_support import signed_in
from served import Served, eventually
from service_support import duration

from jobwire.db.tables import schedule
from jobwire.v1 import job_pb2, schedule_pb2

pytestmark = pytest.mark.timeout(60)


async def _create(served: Served, schedule_id: str, title: str = "", **timing: object) -> schedule_pb2.Schedule:
    template = job_pb2.SubmitRequest(job_type="report", queue="nightly", title=title)
    request = schedule_pb2.CreateScheduleRequest(schedule_id=schedule_id, template=template, **timing)  # type: ignore[arg-type]
    return await served.schedules.CreateSchedule(request, metadata=CLIENT.metadata)


def field(html: str, id_: str) -> str:
    found = re.search(rf'<dd id="{id_}"[^>]*>([^<]*)</dd>', html)
    assert found, id_
    return found.group(1)


async def test_the_list_and_a_schedule_say_when_it_fires(served: Served, gateway: str) -> None:
    nightly = await _create(served, "nightly", "Nightly <sales> & stock", cron="0 2 * * *", time_zone="Asia/Shanghai")
    await _create(served, "often", every=duration(90))
    next_fire = nightly.next_fire_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%SZ")
    async with signed_in(gateway, CLIENT) as client:
        listed = (await client.get("/schedules")).text
        assert re.findall(r'<tr data-schedule="([^"]+)">', listed) == ["nightly", "often"]
        nightly_row = listed.split('data-schedule="nightly"', 1)[1].split("</tr>", 1)[0]
        assert "cron 0 2 * * *" in nightly_row and "Asia/Shanghai" in nightly_row and next_fire in nightly_row
        first = re.match(r'>\s*<td class="title">([^<]*)</td>', nightly_row)  # the template's title, escaped
        assert first and first.group(1) == "Nightly &lt;sales&gt; &amp; stock"
        assert "every 1:30" in listed
        page = (await client.get("/schedules/nightly")).text
        assert field(page, "next") == next_fire and field(page, "time-zone") == "Asia/Shanghai"
        assert field(page, "state") == "Active" and field(page, "skipped") == "0"
        assert "report · nightly" in page and 'id="no-jobs"' in page
        assert (await client.get("/schedules/none")).status_code == 404
        assert (await client.get("/schedules/not valid!")).status_code == 404


@pytest.mark.parametrize("token", [CLIENT, OPERATOR], ids=["client", "admin"])
async def test_pause_resume_and_delete_through_the_page(served: Served, gateway: str, token: Token) -> None:
    await _create(served, "nightly", cron="0 2 * * *")
    async with signed_in(gateway, token) as client:
        assert 'data-schedule="nightly"' in (await client.get("/schedules")).text
        assert (await client.post("/schedules/nightly/pause", data={"csrf": "guessed"})).status_code == 403
        paused = await client.post("/schedules/nightly/pause", data=csrf(client))
        assert paused.status_code == 303 and paused.headers["location"] == "/schedules/nightly"
        page = (await client.get("/schedules/nightly")).text
        assert field(page, "state") == "Paused" and field(page, "next") == "" and 'id="resume"' in page
        assert (await client.post("/schedules/nightly/resume", data=csrf(client))).status_code == 303
        assert field((await client.get("/schedules/nightly")).text, "state") == "Active"
        deleted = await client.post("/schedules/nightly/delete", data=csrf(client))
        assert deleted.status_code == 303 and deleted.headers["location"] == "/schedules"
        assert 'id="no-schedules"' in (await client.get("/schedules")).text


async def test_a_schedule_page_lists_the_jobs_it_made_latest_first(served: Served, gateway: str) -> None:
    await _create(served, "tick", every=duration(1), overlap=schedule_pb2.Schedule.ALLOW)

    async def made() -> list[str] | None:
        request = schedule_pb2.ListScheduleJobsRequest(schedule_id="tick")
        jobs = [j.job_no for j in (await served.schedules.ListScheduleJobs(request, metadata=CLIENT.metadata)).jobs]
        return jobs if len(jobs) >= 2 else None

    await eventually(made, timeout=20, what="two firings")
    await served.schedules.PauseSchedule(schedule_pb2.ScheduleRef(schedule_id="tick"), metadata=CLIENT.metadata)
    expected = await made()
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get("/schedules/tick")).text
        assert re.findall(r'<tr data-job="([^"]+)"', page) == expected
        assert expected and f'<a href="/jobs/{expected[0]}" id="last-job">' in page


async def test_the_schedule_pages_speak_zh_cn(served: Served, gateway: str) -> None:
    await _create(served, "nightly", cron="0 2 * * *")
    async with signed_in(gateway, CLIENT, **ZH) as client:
        listed = (await client.get("/schedules")).text
        for word in ("定时任务", "时间规则", "时区", "下次触发", "上次触发", "已跳过", "启用中"):
            assert word in listed, word
        page = (await client.get("/schedules/nightly")).text
        assert "暂停" in page and "删除" in page and "尚未创建任何任务。" in page


async def test_a_schedule_shows_the_fire_times_it_missed(served: Served, gateway: str) -> None:
    await _create(served, "nightly", cron="0 2 * * *")
    counted = sa.update(schedule).where(schedule.c.schedule_id == "nightly").values(missed_firings=3, skipped_firings=2)
    served.runtime.store.db.write(lambda conn: conn.execute(counted))  # as the schedule loop counts them
    async with signed_in(gateway, CLIENT) as client:
        page = (await client.get("/schedules/nightly")).text
        assert (field(page, "missed"), field(page, "skipped")) == ("3", "2")
        listed = (await client.get("/schedules")).text
        assert '<td data-field="missed">3</td>' in listed
