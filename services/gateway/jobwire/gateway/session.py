"""The cookies a signed-in browser holds: the person's token, a CSRF token, the language.

The token cookie is HttpOnly (no script can read it) and SameSite=Strict (no other site's
page can make the browser send it); it is Secure when the page came over https. The CSRF
token is a random value, set with the sign-in form (before there is a session, so another
site cannot sign a browser in with its own token) and again at sign-in, and repeated in
every form that changes something. A POST is refused unless its form carries the cookie's
value and it came from this site's own pages: its Origin header, or its Referer when it has
no Origin, names the gateway (JOBWIRE_GATEWAY_ORIGIN, else the host the request was sent
to). A POST with neither header is refused too: every browser sends Origin with a POST, so
only a client that is not a browser omits both, and it can send one.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

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


def signin_csrf(request: Request) -> str:
    """The CSRF token for the sign-in form: the browser's own, or a new one (keep it with `keep_csrf`)."""
    return csrf_of(request) or secrets.token_urlsafe(32)


def keep_csrf(request: Request, response: Response, value: str) -> None:
    _cookie(request, response, CSRF_COOKIE, value)


def sign_in(request: Request, response: Response, token: str) -> None:
    """Keep `token` for this browser session, with a fresh CSRF token beside it."""
    _cookie(request, response, TOKEN_COOKIE, token)
    keep_csrf(request, response, secrets.token_urlsafe(32))


def _cookie(request: Request, response: Response, name: str, value: str) -> None:
    secure = request.url.scheme == "https"
    response.set_cookie(name, value, httponly=True, samesite="strict", secure=secure, path="/")


def sign_out(response: Response) -> None:
    for name in (TOKEN_COOKIE, CSRF_COOKIE):
        response.delete_cookie(name, path="/", httponly=True, samesite="strict")


def csrf_ok(request: Request, submitted: object) -> bool:
    """True when a POST came from this site's pages and its form's CSRF token is this browser's."""
    expected = csrf_of(request)
    token_ok = bool(expected) and isinstance(submitted, str) and secrets.compare_digest(expected, submitted)
    return token_ok and from_this_site(request)


def from_this_site(request: Request) -> bool:
    """Whether the request's Origin (or, without one, its Referer) is the gateway's own origin."""
    sent = request.headers.get("origin") or _origin_of(request.headers.get("referer", ""))
    if not sent or sent == "null":
        return False
    ours: str = request.app.state.settings.origin
    if ours:
        return sent == ours
    return urlsplit(sent).netloc == request.headers.get("host", "")


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""


def remember_locale(response: Response, locale: str) -> None:
    if locale in LOCALES:
        response.set_cookie(LANG_COOKIE, locale, max_age=LANG_MAX_AGE_S, samesite="lax", path="/")
