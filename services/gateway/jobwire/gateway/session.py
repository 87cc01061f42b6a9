"""The cookies a signed-in browser holds: the person's token, a CSRF token, the language.

The token cookie is HttpOnly (no script can read it) and SameSite=Strict (no other site's
page can make the browser send it); it is Secure when the page came over https. The CSRF
token is a random value set at sign-in and repeated in every form that changes something;
a POST whose form does not carry the cookie's value is refused.
"""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import Response

from jobwire.gateway.i18n import LOCALES

TOKEN_COOKIE = "jobwire_token"
CSRF_COOKIE = "jobwire_csrf"
LANG_COOKIE = "jobwire_lang"
CSRF_FIELD = "csrf"
LANG_MAX_AGE_S = 365 * 24 * 3600


def token_of(request: Request) -> str | None:
    return request.cookies.get(TOKEN_COOKIE) or None


def csrf_of(request: Request) -> str:
    return request.cookies.get(CSRF_COOKIE, "")


def sign_in(request: Request, response: Response, token: str) -> None:
    """Keep `token` for this browser session, with a fresh CSRF token beside it."""
    secure = request.url.scheme == "https"
    for name, value in ((TOKEN_COOKIE, token), (CSRF_COOKIE, secrets.token_urlsafe(32))):
        response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path="/")


def sign_out(response: Response) -> None:
    for name in (TOKEN_COOKIE, CSRF_COOKIE):
        response.delete_cookie(name, path="/", httponly=True, samesite="strict")


def csrf_ok(request: Request, submitted: object) -> bool:
    """True when the form's CSRF token is this session's."""
    expected = csrf_of(request)
    return bool(expected) and isinstance(submitted, str) and secrets.compare_digest(expected, submitted)


def remember_locale(response: Response, locale: str) -> None:
    if locale in LOCALES:
        response.set_cookie(LANG_COOKIE, locale, max_age=LANG_MAX_AGE_S, samesite="lax", path="/")
