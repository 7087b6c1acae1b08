"""Who may see the dashboard, and which POSTs are the dashboard's own.

- Authentication (optional): HTTP basic (``user:password``) and/or a bearer token. A token may
  also arrive once as ``?token=...``: it is then kept in an HttpOnly cookie and the address
  loses it. Every path, ``/metrics`` and the static files included, needs it when set.
- CSRF: every page sets a random ``echomq_csrf`` cookie (SameSite=Strict) and puts the same
  value in each form; a POST whose form value does not match the cookie is refused, and so is
  one whose ``Origin`` names another host (double-submit cookie plus origin check).
- Read-only: a plain flag the app checks before any action, and the templates read to hide
  every button.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

CSRF_COOKIE = "echomq_csrf"
CSRF_FIELD = "csrf"
TOKEN_COOKIE = "echomq_token"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class Access:
    """The dashboard's access settings.

    Attributes:
        read_only: hide and refuse every action.
        basic: ``(user, password)`` for HTTP basic authentication, or None.
        token: a bearer token, or None.
    """

    read_only: bool = False
    basic: tuple[str, str] | None = None
    token: str | None = None

    @classmethod
    def build(cls, read_only: bool, auth: str | None, token: str | None) -> Access:
        """Validated settings; ``auth`` is ``"user:password"``."""
        basic = None
        if auth is not None:
            user, sep, password = auth.partition(":")
            if not sep or not user or not password:
                raise ValueError("auth must be 'user:password' with both parts non-empty")
            basic = (user, password)
        if token is not None and not token:
            raise ValueError("token must not be empty")
        return cls(read_only=read_only, basic=basic, token=token)

    @property
    def protected(self) -> bool:
        """Whether any authentication is required."""
        return self.basic is not None or self.token is not None


def _same(given: str, expected: str) -> bool:
    return secrets.compare_digest(given.encode(), expected.encode())


def _basic_ok(header: str, basic: tuple[str, str]) -> bool:
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    return _same(user, basic[0]) & _same(password, basic[1])


def _token_ok(request: Request, token: str) -> bool:
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and _same(given.strip(), token):
        return True
    return _same(request.cookies.get(TOKEN_COOKIE, ""), token)


class AuthMiddleware:
    """Refuse any request that does not authenticate as :class:`Access` requires."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        self.access = access

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.access.protected:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        response = self._check(request)
        if response is None:
            await self.app(scope, receive, send)
        else:
            await response(scope, receive, send)

    def _check(self, request: Request) -> Response | None:
        access = self.access
        if access.token is not None:
            given = request.query_params.get("token")
            if given is not None and _same(given, access.token):
                return _keep_token(request, access.token)
            if _token_ok(request, access.token):
                return None
        if access.basic is not None and _basic_ok(
            request.headers.get("authorization", ""), access.basic
        ):
            return None
        headers = {}
        if access.basic is not None:
            headers["WWW-Authenticate"] = 'Basic realm="echomq dashboard", charset="UTF-8"'
        return PlainTextResponse("authentication required", status_code=401, headers=headers)


def _keep_token(request: Request, token: str) -> Response:
    """Store a token given in the address in a cookie, and send the browser on without it."""
    query = urlencode([(k, v) for k, v in parse_qsl(request.url.query) if k != "token"])
    target = request.url.path + (f"?{query}" if query else "")
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        TOKEN_COOKIE, token, httponly=True, samesite="strict", path=_cookie_path(request)
    )
    return response


def _cookie_path(request: Request) -> str:
    return str(request.scope.get("root_path") or "") or "/"


def csrf_token(request: Request) -> str:
    """The CSRF token of this browser (made on its first page)."""
    token = request.cookies.get(CSRF_COOKIE)
    if token and len(token) >= 32:
        return token
    new: str | None = getattr(request.state, "new_csrf", None)
    if new is None:
        new = request.state.new_csrf = secrets.token_urlsafe(32)
    return new


def remember_csrf(request: Request, response: Response) -> None:
    """Set the CSRF cookie on ``response`` when this request made a new token."""
    new = getattr(request.state, "new_csrf", None)
    if new:
        response.set_cookie(
            CSRF_COOKIE, new, httponly=True, samesite="strict", path=_cookie_path(request)
        )


def check_post(request: Request, form: dict[str, str]) -> str | None:
    """Why this POST is not the dashboard's own, or None when it is."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host"):
        return "cross-origin request refused"
    cookie = request.cookies.get(CSRF_COOKIE, "")
    given = form.get(CSRF_FIELD, "")
    if not cookie or not given or not _same(cookie, given):
        return "missing or wrong CSRF token: reload the page and try again"
    return None
