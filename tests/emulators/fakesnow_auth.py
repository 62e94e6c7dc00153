"""Key-pair logins on the fakesnow server, checked as Snowflake checks them.

fakesnow 0.12's ``/session/v1/login-request`` opens a session for any request: it reads neither the
authenticator, nor the JWT of a key-pair login, nor the password. Snowflake, for a user with an
``RSA_PUBLIC_KEY``, verifies the JWT: RS256, issuer ``<ACCOUNT>.<USER>.SHA256:<fingerprint of the
public key>``, subject ``<ACCOUNT>.<USER>``, not expired, signed by that key; and a
``TYPE = SERVICE`` user cannot log in with a password at all. This middleware does the same:

* ``CREATE USER ... RSA_PUBLIC_KEY = '...'`` (``TYPE = SERVICE`` or not) and ``ALTER USER ... SET
  RSA_PUBLIC_KEY[_2] = '...'`` sent to the server register the user's public keys (the statements
  may be no-ops in fakesnow itself, through ``nop_regexes``); the registry is kept in
  ``DIR/users-auth.json`` of a server started with ``--data-dir``, so it survives a restart;
* a key-pair login (``AUTHENTICATOR = SNOWFLAKE_JWT``) always has its JWT's algorithm, issuer,
  subject and lifetime checked, and its signature verified when the user has registered keys;
  a user fakesnow never heard of has no key to verify against, which is the one gap left;
* a password login of a registered SERVICE user is refused.

Refusals answer as Snowflake does (``success: false`` with its error code), so the connector raises
its usual ``DatabaseError``.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

LOGIN_PATH = "/session/v1/login-request"
QUERY_PATH = "/queries/v1/query-request"
USERS_FILE = "users-auth.json"
JWT_AUTHENTICATOR = "SNOWFLAKE_JWT"
# Snowflake's answers to a refused login.
JWT_INVALID = ("390144", "JWT token is invalid.")
BAD_PASSWORD = ("390100", "Incorrect username or password was specified.")

_USER_STATEMENT = re.compile(
    r"^\s*(?P<verb>CREATE(?:\s+OR\s+REPLACE)?|ALTER)\s+USER\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(?P<name>\"(?:[^\"]|\"\")+\"|[A-Za-z_][A-Za-z0-9_$]*)(?P<rest>.*)$",
    re.IGNORECASE | re.DOTALL,
)
_KEY = re.compile(r"\bRSA_PUBLIC_KEY(?P<slot>_2)?\s*=\s*'(?P<body>[^']*)'", re.IGNORECASE)
_TYPE = re.compile(r"\bTYPE\s*=\s*'?(?P<type>\w+)'?", re.IGNORECASE)


def user_name(identifier: str) -> str:
    """A user as Snowflake stores it: a quoted identifier as written, an unquoted one upper case."""
    if identifier.startswith('"'):
        return identifier[1:-1].replace('""', '"')
    return identifier.upper()


def fingerprint(public_key_body: str) -> str:
    """``SHA256:<base64 of the SHA-256 of the DER SubjectPublicKeyInfo>``, as ``RSA_PUBLIC_KEY_FP``."""
    der = base64.b64decode("".join(public_key_body.split()))
    return "SHA256:" + base64.b64encode(hashlib.sha256(der).digest()).decode()


class UserRegistry:
    """The users whose authentication the server knows: type and public keys (by slot)."""

    def __init__(self, path: Path | None = None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, Any]] = {}
        if path is not None and path.exists():
            self._users = json.loads(path.read_text())

    def get(self, user: str) -> dict[str, Any] | None:
        with self._lock:
            entry = self._users.get(user)
            return dict(entry) if entry else None

    def observe(self, sql: str) -> None:
        """Register what a CREATE USER / ALTER USER statement says about authentication."""
        match = _USER_STATEMENT.match(sql.strip().rstrip(";"))
        if match is None:
            return
        name, rest, creating = user_name(match["name"]), match["rest"], match["verb"].upper() != "ALTER"
        keys = {("2" if k["slot"] else "1"): "".join(k["body"].split()) for k in _KEY.finditer(rest)}
        kind = _TYPE.search(rest)
        with self._lock:
            if creating and name in self._users and "REPLACE" not in match["verb"].upper():
                return  # CREATE USER IF NOT EXISTS of an existing user changes nothing
            fresh: dict[str, Any] = {"type": "PERSON", "keys": {}}
            entry = fresh if creating else self._users.get(name, fresh)
            entry["keys"].update(keys)
            if kind:
                entry["type"] = kind["type"].upper()
            if creating or keys or kind:
                self._users[name] = entry
                if self._path is not None:
                    tmp = self._path.with_suffix(".tmp")
                    tmp.write_text(json.dumps(self._users))
                    tmp.replace(self._path)


def check_login(data: dict[str, Any], registry: UserRegistry) -> tuple[str, str] | None:
    """Why Snowflake would refuse this login (an error code and message); None when it accepts it."""
    account = str(data.get("ACCOUNT_NAME", "")).partition(".")[0].upper()
    user = str(data.get("LOGIN_NAME", ""))
    registered = registry.get(user.upper()) or registry.get(user)
    if str(data.get("AUTHENTICATOR", "")).upper() != JWT_AUTHENTICATOR:
        if registered is not None and registered["type"] == "SERVICE":
            return BAD_PASSWORD
        return None
    token = data.get("TOKEN")
    if not isinstance(token, str) or not token:
        return JWT_INVALID
    try:
        header = jwt.get_unverified_header(token)
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.PyJWTError:
        return JWT_INVALID
    subject = f"{account}.{user.upper()}"
    issuer = str(claims.get("iss", ""))
    now = time.time()
    if (
        header.get("alg") != "RS256"
        or claims.get("sub") != subject
        or not issuer.startswith(subject + ".SHA256:")
        or float(claims.get("exp", 0)) <= now
        or float(claims.get("iat", now + 60)) > now + 60
    ):
        return JWT_INVALID
    if registered is None:
        return None  # no key to verify against: fakesnow knows no users
    issued_for = issuer[len(subject) + 1 :]
    for body in registered["keys"].values():
        if fingerprint(body) != issued_for:
            continue
        public_key = serialization.load_der_public_key(base64.b64decode(body))
        try:
            jwt.decode(token, key=public_key, algorithms=["RS256"], options={"verify_aud": False})  # type: ignore[arg-type]
        except jwt.PyJWTError:
            return JWT_INVALID
        return None
    return JWT_INVALID


def _json_body(body: bytes, headers: Any) -> dict[str, Any]:
    if headers.get("Content-Encoding") == "gzip":
        body = gzip.decompress(body)
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class KeyPairAuthMiddleware(BaseHTTPMiddleware):
    """Checks logins and learns users' keys; see the module."""

    registry = UserRegistry()

    @classmethod
    def keep_users_in(cls, data_dir: Path) -> None:
        cls.registry = UserRegistry(data_dir / USERS_FILE)

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path == LOGIN_PATH:
            data = _json_body(await request.body(), request.headers).get("data", {})
            refused = check_login(data if isinstance(data, dict) else {}, self.registry)
            if refused is not None:
                code, message = refused
                return JSONResponse({"data": {"errorCode": code}, "code": code, "message": message, "success": False})
        elif request.url.path == QUERY_PATH:
            sql = str(_json_body(await request.body(), request.headers).get("sqlText", ""))
            self.registry.observe(sql)
        return await call_next(request)
