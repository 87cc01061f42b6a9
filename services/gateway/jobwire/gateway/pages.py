"""Rendering a page: the template, the request's language, the words and the CSRF token."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from jobwire.gateway import session
from jobwire.gateway.i18n import LOCALES, pick_locale, t

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")  # autoescapes .html
# Scripts and styles come only from /static (no inline code to inject into); no framing,
# so another site cannot overlay a Cancel button; a person's jobs are not cached on the way.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
}


def locale_of(request: Request) -> str:
    return pick_locale(request.cookies.get(session.LANG_COOKIE), request.headers.get("accept-language"))


def page(request: Request, name: str, *, status_code: int = 200, **context: Any) -> Response:
    """`name` rendered in the request's language; templates say `tr("key")` for a word."""
    locale = locale_of(request)

    def tr(key: str, **values: object) -> str:
        return t(key, locale, **values)

    response = TEMPLATES.TemplateResponse(
        request,
        name,
        {
            "locale": locale,
            "locales": LOCALES,
            "tr": tr,
            "csrf": session.csrf_of(request),
            "csrf_field": session.CSRF_FIELD,
            "signed_in": session.token_of(request) is not None,
            **context,
        },
        status_code=status_code,
    )
    response.headers.update({**PAGE_HEADERS, "Content-Language": locale})
    return response


def fragment(name: str, **context: Any) -> str:
    """A piece of a page (such as a jobs table row, `_job_row.html`) on its own, autoescaped like a page."""
    return TEMPLATES.get_template(name).render(context)
