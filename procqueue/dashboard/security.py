"""The dashboard's gate: Host check, access token, cross-site refusal, headers.

- With ``allowed_hosts``, a request whose Host header names another host is
  refused (400): a DNS-rebinding page cannot talk to a loopback dashboard.
- With a token, every request needs it: ``Authorization: Bearer T``, or the
  cookie set once by opening any page with ``?token=T`` (HttpOnly,
  SameSite=Strict; the token is then dropped from the address bar).
- Requests that change state are POST only, must come from this origin
  (``Origin`` / ``Sec-Fetch-Site``) and must carry the per-process CSRF token
  (``X-CSRF-Token`` header or ``csrf`` form field, checked by `csrf_ok`).
- Every response forbids framing, sniffing, inline script and caching.
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from urllib.parse import parse_qs, urlsplit

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

COOKIE = "procqueue_dashboard"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")

HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; style-src-attr 'unsafe-inline'; "
        "img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cross-origin-resource-policy": "same-origin",
}


def same(a: str | None, b: str) -> bool:
    """Constant-time string equality."""
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def host_name(host_header: str) -> str:
    """The host part of a Host header value: ``[::1]:80`` -> ``::1``."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].partition("]")[0]
    return value.rpartition(":")[0] if value.count(":") == 1 else value


class Guard:
    """ASGI middleware applying the rules in this module's docstring."""

    def __init__(
        self, app: ASGIApp, *, token: str | None, allowed_hosts: Sequence[str] | None
    ) -> None:
        self.app = app
        self.token = token or None
        self.allowed_hosts = {h.lower() for h in allowed_hosts} if allowed_hosts else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(Request(scope))
        if refusal is not None:
            await refusal(scope, receive, with_headers(send))
            return
        await self.app(scope, receive, with_headers(send))

    def check(self, request: Request) -> Response | None:
        """A refusal (or the token-cookie redirect), or None to let it through."""
        headers = request.headers
        hosts = self.allowed_hosts
        if hosts is not None and host_name(headers.get("host", "")) not in hosts:
            return PlainTextResponse("unexpected Host header\n", status_code=400)
        if self.token is not None:
            if request.method in SAFE_METHODS and same(
                request.query_params.get("token"), self.token
            ):
                return self.remember(request)
            scheme, _, credential = headers.get("authorization", "").partition(" ")
            authorized = (scheme.lower() == "bearer" and same(credential, self.token)) or same(
                request.cookies.get(COOKIE), self.token
            )
            if not authorized:
                return PlainTextResponse(
                    "This dashboard needs its access token: open it once as /?token=TOKEN, "
                    "or send the header 'Authorization: Bearer TOKEN'.\n",
                    status_code=401,
                    headers={"www-authenticate": 'Bearer realm="procqueue"'},
                )
        if request.method not in SAFE_METHODS and not same_origin(request):
            return PlainTextResponse("cross-site request refused\n", status_code=403)
        return None

    def remember(self, request: Request) -> Response:
        """Sets the token cookie and redirects to the same URL without the token."""
        query = request.url.remove_query_params("token").query
        location = request.url.path + (f"?{query}" if query else "")
        response = RedirectResponse(location, status_code=303)
        assert self.token is not None
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
        return response


def same_origin(request: Request) -> bool:
    """False when the browser says the request comes from another site."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    if origin == "null":
        return False
    return urlsplit(origin).netloc.lower() == request.headers.get("host", "").lower()


async def csrf_ok(request: Request, csrf: str) -> bool:
    """Whether the request carries the CSRF token, as a header or a form field."""
    if same(request.headers.get(CSRF_HEADER), csrf):
        return True
    if request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        body = await request.body()
        if len(body) > 4096:
            return False
        field = parse_qs(body.decode("latin-1")).get(CSRF_FIELD, [None])[0]
        return same(field, csrf)
    return False


async def form_field(request: Request, name: str) -> str | None:
    """One field of an urlencoded form body (the body is cached by Starlette)."""
    if not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        return None
    body = await request.body()
    return parse_qs(body.decode("latin-1")).get(name, [None])[0]


def with_headers(send: Send) -> Send:
    """`send` adding the security headers (and no-store caching) to the response."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = MutableHeaders(scope=message)
            for name, value in HEADERS.items():
                headers.setdefault(name, value)
            headers.setdefault("cache-control", "no-store")
        await send(message)

    return sending
