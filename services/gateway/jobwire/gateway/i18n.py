"""Every word the pages show, in en and zh-CN, and which of the two a request gets.

A job's own labels (status, stage, detail) come from the server's Display, in the locale the
gateway asks for; these are only the words around them.
"""

from __future__ import annotations

LOCALES = ("en", "zh-CN")
DEFAULT_LOCALE = "en"

CATALOG: dict[str, dict[str, str]] = {
    "title": {"en": "jobwire", "zh-CN": "jobwire 任务"},
    "nav_jobs": {"en": "My jobs", "zh-CN": "我的任务"},
    "nav_evidence": {"en": "Evidence", "zh-CN": "运维证据"},
    "nav_queues": {"en": "Queues", "zh-CN": "队列"},
    "nav_workers": {"en": "Workers", "zh-CN": "处理程序"},
    "nav_schedules": {"en": "Schedules", "zh-CN": "定时任务"},
    "sign_in": {"en": "Sign in", "zh-CN": "登录"},
    "sign_out": {"en": "Sign out", "zh-CN": "退出登录"},
    "language": {"en": "Language", "zh-CN": "语言"},
    "signin_heading": {"en": "Sign in with your jobwire token", "zh-CN": "使用 jobwire 令牌登录"},
    "signin_token": {"en": "Token", "zh-CN": "令牌"},
    "signin_help": {
        "en": "The token stays in this browser's cookie and goes only to the job service.",
        "zh-CN": "令牌只保存在本浏览器的 Cookie 中，只发送给任务服务。",
    },
    "signin_refused": {"en": "This token was not accepted.", "zh-CN": "此令牌未被接受。"},
    "signin_expired": {"en": "Please sign in again.", "zh-CN": "请重新登录。"},
    "jobs_heading": {"en": "My jobs", "zh-CN": "我的任务"},
    "col_title": {"en": "Title", "zh-CN": "标题"},
    "col_job": {"en": "Job", "zh-CN": "任务编号"},
    "col_type": {"en": "Type", "zh-CN": "类型"},
    "col_status": {"en": "Status", "zh-CN": "状态"},
    "col_stage": {"en": "Stage", "zh-CN": "阶段"},
    "col_units": {"en": "Units", "zh-CN": "进度单位"},
    "col_percent": {"en": "Percent", "zh-CN": "百分比"},
    "col_detail": {"en": "Detail", "zh-CN": "详情"},
    "col_updated": {"en": "Updated", "zh-CN": "更新时间"},
    "filter_status": {"en": "Status", "zh-CN": "状态"},
    "filter_all": {"en": "All", "zh-CN": "全部"},
    "filter_apply": {"en": "Search", "zh-CN": "搜索"},
    "filter_job_no": {"en": "Job number", "zh-CN": "任务编号"},
    "filter_type": {"en": "Type", "zh-CN": "类型"},
    "filter_queue": {"en": "Queue", "zh-CN": "队列"},
    "filter_owner": {"en": "Owner", "zh-CN": "所有者"},
    "filter_label": {"en": "Label (key=value)", "zh-CN": "标签（键=值）"},
    "filter_clear": {"en": "Clear", "zh-CN": "清除"},
    "col_created": {"en": "Created", "zh-CN": "创建时间"},
    "col_started": {"en": "Started", "zh-CN": "开始时间"},
    "col_duration": {"en": "Duration", "zh-CN": "耗时"},
    "col_select": {"en": "Select", "zh-CN": "选择"},
    "select_job": {"en": "Select {job_no}", "zh-CN": "选择 {job_no}"},
    "page_next": {"en": "Next page", "zh-CN": "下一页"},
    "page_previous": {"en": "Previous page", "zh-CN": "上一页"},
    "bulk_cancel": {"en": "Cancel selected", "zh-CN": "取消所选"},
    "bulk_retry": {"en": "Retry selected", "zh-CN": "重试所选"},
    "bulk_heading_cancel": {"en": "Cancel: each selected job", "zh-CN": "取消：所选的每个任务"},
    "bulk_heading_retry": {"en": "Retry: each selected job", "zh-CN": "重试：所选的每个任务"},
    "bulk_done": {"en": "Done", "zh-CN": "已执行"},
    "bulk_refused": {"en": "Not done", "zh-CN": "未执行"},
    "col_outcome": {"en": "Outcome", "zh-CN": "结果"},
    "back_to_list": {"en": "Back to the list", "zh-CN": "返回列表"},
    "jobs_empty": {"en": "No jobs to show.", "zh-CN": "没有可显示的任务。"},
    # a page with none of the jobs searched for, and a next page: ListJobs looked at part of the list only
    "jobs_empty_more": {
        "en": "No jobs on this page; the search goes on with the next page.",
        "zh-CN": "本页没有符合条件的任务；搜索在下一页继续。",
    },
    "live_note": {"en": "This page updates by itself.", "zh-CN": "本页面会自动更新。"},
    "job_heading": {"en": "Job {job_no}", "zh-CN": "任务 {job_no}"},
    "stage_of": {"en": "Stage {i} of {n}", "zh-CN": "第 {i} 步，共 {n} 步"},
    "no_stage": {"en": "Not started", "zh-CN": "尚未开始"},
    "units_of": {"en": "{done} of {total}", "zh-CN": "{done} / {total}"},
    "units_open": {"en": "{done} so far", "zh-CN": "已完成 {done}"},
    "field_type": {"en": "Type", "zh-CN": "类型"},
    "field_attempt": {"en": "Attempt", "zh-CN": "尝试次数"},
    "field_created": {"en": "Created", "zh-CN": "创建时间"},
    "field_input": {"en": "Input", "zh-CN": "输入摘要"},
    "field_finished": {"en": "Finished", "zh-CN": "结束时间"},
    "field_result": {"en": "Result", "zh-CN": "结果"},
    "field_error": {"en": "Why it did not complete", "zh-CN": "未完成的原因"},
    "action_cancel": {"en": "Cancel", "zh-CN": "取消"},
    "action_retry": {"en": "Retry", "zh-CN": "重试"},
    "action_force_retry": {"en": "Retry anyway (admin)", "zh-CN": "仍然重试（管理员）"},
    "force_retry_note": {
        "en": "Its error says a retry will not help: retry it once the cause is fixed. The trail records who did.",
        "zh-CN": "其错误表明重试无济于事：请在原因修复后再重试。事件记录会记下操作者。",
    },
    "action_download": {"en": "Download result", "zh-CN": "下载结果"},
    "back_to_jobs": {"en": "Back to my jobs", "zh-CN": "返回我的任务"},
    "evidence_heading": {"en": "Evidence", "zh-CN": "运维证据"},
    "findings": {"en": "Findings", "zh-CN": "发现的问题"},
    "findings_none": {"en": "Nothing to look at.", "zh-CN": "没有需要处理的问题。"},
    "col_kind": {"en": "Kind", "zh-CN": "类别"},
    "col_worker": {"en": "Worker", "zh-CN": "处理程序"},
    "col_heartbeat": {"en": "Last heartbeat", "zh-CN": "最后心跳"},
    "workers": {"en": "Workers and their leases", "zh-CN": "处理程序及其租约"},
    "workers_none": {"en": "No worker has been seen.", "zh-CN": "尚未见到任何处理程序。"},
    "col_queues": {"en": "Queues", "zh-CN": "队列"},
    "col_job_types": {"en": "Job types", "zh-CN": "任务类型"},
    "col_last_seen": {"en": "Last seen", "zh-CN": "最后出现"},
    "col_leases": {"en": "Leases held", "zh-CN": "持有租约"},
    "leases_stalled": {"en": "stalled", "zh-CN": "已停滞"},
    "shared_fleet": {"en": "shared fleet", "zh-CN": "共享处理程序组"},
    "trail": {"en": "Event trail", "zh-CN": "事件记录"},
    "handler_evidence": {"en": "What the handler recorded", "zh-CN": "处理程序记录的证据"},
    "latest_checkpoint": {"en": "Latest checkpoint", "zh-CN": "最新检查点"},
    "checkpoint_binary": {
        "en": "Not text: only its size and digest are shown.",
        "zh-CN": "非文本内容：仅显示大小和摘要。",
    },
    "col_key": {"en": "Key", "zh-CN": "键"},
    "col_value": {"en": "Value", "zh-CN": "值"},
    "timeline_evidence": {"en": "All of its evidence", "zh-CN": "查看全部证据"},
    "trail_of": {"en": "Event trail of {job_no}", "zh-CN": "{job_no} 的事件记录"},
    "trail_show": {"en": "Show trail", "zh-CN": "查看记录"},
    "col_version": {"en": "Version", "zh-CN": "版本"},
    "col_time": {"en": "Time", "zh-CN": "时间"},
    "col_event": {"en": "Event", "zh-CN": "事件"},
    "col_change": {"en": "Change", "zh-CN": "状态变化"},
    "col_attempt": {"en": "Attempt", "zh-CN": "尝试"},
    "requeue": {"en": "Requeue", "zh-CN": "重新排队"},
    "requeue_reason": {"en": "Reason (kept in the trail)", "zh-CN": "原因（记入事件记录）"},
    "kind_STALLED": {"en": "Lease expired", "zh-CN": "租约已过期"},
    "kind_RUNNING_WITHOUT_LEASE": {"en": "Running without a lease", "zh-CN": "运行中但无租约"},
    "kind_TERMINAL_WITH_TOKEN": {"en": "Ended but still leased", "zh-CN": "已结束但仍有租约"},
    "kind_NO_PROGRESS": {"en": "No progress", "zh-CN": "没有进展"},
    "kind_NO_WORKER": {"en": "No worker", "zh-CN": "没有处理程序"},
    "timeline": {"en": "Timeline", "zh-CN": "时间线"},
    "col_by": {"en": "By", "zh-CN": "执行者"},
    "by_worker": {"en": "worker {worker}", "zh-CN": "处理程序 {worker}"},
    "by_person": {"en": "a person", "zh-CN": "用户"},
    "by_operator": {"en": "an operator", "zh-CN": "运维人员"},
    "by_server": {"en": "the server", "zh-CN": "服务器"},
    "field_payload": {"en": "Payload", "zh-CN": "输入数据"},
    "payload_none": {"en": "No payload.", "zh-CN": "没有输入数据。"},
    "not_text": {"en": "{size}, not text: not shown.", "zh-CN": "{size}，不是文本：不显示。"},
    "preview_cut": {"en": "The first 64 KiB of {size}.", "zh-CN": "{size} 中的前 64 KiB。"},
    "field_result_preview": {"en": "Result preview", "zh-CN": "结果预览"},
    "result_not_shown": {
        "en": "{size}, {content_type}: too large or not text to show here.",
        "zh-CN": "{size}，{content_type}：太大或不是文本，此处不显示。",
    },
    "field_depends_on": {"en": "Depends on", "zh-CN": "依赖"},
    "field_batch": {"en": "Batch", "zh-CN": "批次"},
    "field_queue": {"en": "Queue", "zh-CN": "队列"},
    "field_started": {"en": "Started", "zh-CN": "开始时间"},
    "field_duration": {"en": "Duration", "zh-CN": "耗时"},
    "workers_heading": {"en": "Workers", "zh-CN": "处理程序"},
    "worker_live": {"en": "Live", "zh-CN": "在线"},
    "worker_gone": {"en": "Gone", "zh-CN": "已离线"},
    "workers_note": {
        "en": "Gone: not seen within one lease and the stall grace, when the server would call its leases lost.",
        "zh-CN": "已离线：超过一个租约期加宽限期未出现，此时服务器会认为其租约已丢失。",
    },
    "batch_heading": {"en": "Batch {batch_id}", "zh-CN": "批次 {batch_id}"},
    "batch_finished_of": {"en": "{finished} of {total} finished", "zh-CN": "已结束 {finished} / {total}"},
    "batch_cancel": {"en": "Cancel its {n} unfinished jobs", "zh-CN": "取消其中 {n} 个未结束的任务"},
    "batch_jobs": {"en": "Its jobs", "zh-CN": "批次中的任务"},
    "count_queued": {"en": "Queued", "zh-CN": "排队中"},
    "count_waiting": {"en": "Waiting for review", "zh-CN": "等待审核"},
    "count_running": {"en": "Running", "zh-CN": "运行中"},
    "count_cancel_requested": {"en": "Cancelling", "zh-CN": "正在取消"},
    "count_ready": {"en": "Ready", "zh-CN": "已完成"},
    "count_failed": {"en": "Failed", "zh-CN": "失败"},
    "count_cancelled": {"en": "Cancelled", "zh-CN": "已取消"},
    "schedules_heading": {"en": "Schedules", "zh-CN": "定时任务"},
    "schedules_none": {"en": "No schedule yet.", "zh-CN": "尚无定时任务。"},
    "schedule_heading": {"en": "Schedule {schedule_id}", "zh-CN": "定时任务 {schedule_id}"},
    "col_schedule": {"en": "Schedule", "zh-CN": "定时任务"},
    "col_timing": {"en": "When", "zh-CN": "时间规则"},
    "col_time_zone": {"en": "Time zone", "zh-CN": "时区"},
    "col_next": {"en": "Next firing", "zh-CN": "下次触发"},
    "col_last": {"en": "Last firing", "zh-CN": "上次触发"},
    "col_skipped": {"en": "Skipped", "zh-CN": "已跳过"},
    "col_missed": {"en": "Missed", "zh-CN": "已错过"},
    "every": {"en": "every {span}", "zh-CN": "每 {span}"},
    "schedule_paused": {"en": "Paused", "zh-CN": "已暂停"},
    "schedule_active": {"en": "Active", "zh-CN": "启用中"},
    "skipped_note": {
        "en": "Skipped: fire times a server reached that made no job, because the previous job was"
        " unfinished (overlap SKIP) or the submit was refused (the server's log says why)."
        " Missed: fire times no server ran for.",
        "zh-CN": "已跳过：服务器已处理但未创建任务的触发次数（上一个任务未结束且重叠策略为 SKIP，"
        "或提交被拒绝，原因见服务器日志）。已错过：没有服务器运行的触发时间。",
    },
    "field_last_job": {"en": "Last job", "zh-CN": "最近的任务"},
    "field_template": {"en": "Makes", "zh-CN": "创建的任务"},
    "schedule_jobs": {"en": "Jobs it made, latest first", "zh-CN": "它创建的任务（最新在前）"},
    "schedule_jobs_none": {"en": "It has made no job yet.", "zh-CN": "尚未创建任何任务。"},
    "action_delete": {"en": "Delete", "zh-CN": "删除"},
    "queues_heading": {"en": "Queues", "zh-CN": "队列"},
    "queues_none": {"en": "No queue holds jobs or limits yet.", "zh-CN": "尚无包含任务或限制的队列。"},
    "queues_read_at": {"en": "As of {at}", "zh-CN": "截至 {at}"},
    "queues_omitted": {
        "en": "{n} more queues are not shown (the first 200 by name are).",
        "zh-CN": "另有 {n} 个队列未显示（按名称只显示前 200 个）。",
    },
    "col_queue": {"en": "Queue", "zh-CN": "队列"},
    "col_queued": {"en": "Queued", "zh-CN": "排队中"},
    "col_running": {"en": "Running", "zh-CN": "运行中"},
    "col_waiting": {"en": "Waiting for review", "zh-CN": "等待审核"},
    "col_oldest": {"en": "Oldest runnable", "zh-CN": "最久可运行"},
    "col_finished_hour": {"en": "Finished (1 h)", "zh-CN": "完成（1 小时）"},
    "col_failed_hour": {"en": "Failed (1 h)", "zh-CN": "失败（1 小时）"},
    "col_limits": {"en": "Limits", "zh-CN": "限制"},
    "col_state": {"en": "State", "zh-CN": "状态"},
    "queue_paused": {"en": "Paused", "zh-CN": "已暂停"},
    "queue_active": {"en": "Active", "zh-CN": "正常"},
    "action_pause": {"en": "Pause", "zh-CN": "暂停"},
    "action_resume": {"en": "Resume", "zh-CN": "恢复"},
    "limit_max_running": {"en": "At most running", "zh-CN": "最多同时运行"},
    "limit_rate": {"en": "Starts per second", "zh-CN": "每秒启动数"},
    "limit_burst": {"en": "Burst", "zh-CN": "突发数"},
    "limit_none": {"en": "0 or empty: no limit", "zh-CN": "0 或留空：不限制"},
    "action_set_limits": {"en": "Set limits", "zh-CN": "设置限制"},
    "chart_heading": {"en": "Last hour, jobs per minute", "zh-CN": "最近一小时，每分钟任务数"},
    "chart_label": {"en": "Jobs per minute in {queue}", "zh-CN": "{queue} 每分钟任务数"},
    "chart_start": {"en": "{n} min ago", "zh-CN": "{n} 分钟前"},
    "chart_now": {"en": "now", "zh-CN": "现在"},
    "series_submitted": {"en": "Submitted", "zh-CN": "已提交"},
    "series_finished": {"en": "Finished", "zh-CN": "已完成"},
    "series_failed": {"en": "Failed", "zh-CN": "失败"},
    "error_heading": {"en": "Something stopped this page", "zh-CN": "页面无法显示"},
    "error_NOT_FOUND": {"en": "There is no such job for you.", "zh-CN": "没有找到您的这个任务。"},
    "error_PERMISSION_DENIED": {"en": "Your token may not see this page.", "zh-CN": "您的令牌无权查看此页面。"},
    "error_UNAVAILABLE": {
        "en": "The job service cannot be reached just now. Try again in a moment.",
        "zh-CN": "暂时无法连接任务服务，请稍后再试。",
    },
    "error_INVALID_ARGUMENT": {"en": "That request was not valid.", "zh-CN": "请求无效。"},
    "error_FAILED_PRECONDITION": {
        "en": "The job is not in a state that allows this.",
        "zh-CN": "任务当前的状态不允许此操作。",
    },
    "error_OTHER": {"en": "The job service could not do this.", "zh-CN": "任务服务无法完成此操作。"},
    "error_CSRF": {
        "en": "This form is out of date. Reload the page and try again.",
        "zh-CN": "此表单已过期，请刷新页面后重试。",
    },
    "error_PAGE": {"en": "There is no such page.", "zh-CN": "没有这个页面。"},
}


def t(key: str, locale: str, **values: object) -> str:
    """The word `key` in `locale`, with `values` filled in."""
    return CATALOG[key][locale].format(**values)


def pick_locale(cookie: str | None, accept_language: str | None) -> str:
    """The language cookie when set, else the first of Accept-Language we speak, else English."""
    if cookie in LOCALES:
        return cookie
    for tag in _by_preference(accept_language or ""):
        if tag.startswith("zh"):
            return "zh-CN"
        if tag.startswith("en"):
            return "en"
    return DEFAULT_LOCALE


def _by_preference(header: str) -> list[str]:
    """Accept-Language tags, lowercased, highest q first (ties keep their order)."""
    weighted: list[tuple[float, int, str]] = []
    for index, item in enumerate(header.split(",")):
        tag, _, params = item.strip().partition(";")
        q = 1.0
        if params.strip().startswith("q="):
            try:
                q = float(params.strip()[2:])
            except ValueError:
                q = 0.0
        if tag and q > 0:
            weighted.append((-q, index, tag.strip().lower()))
    return [tag for _, _, tag in sorted(weighted)]
