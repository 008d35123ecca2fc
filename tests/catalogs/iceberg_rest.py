"""An Iceberg REST catalog server for the tests, on loopback, backed by pyiceberg's SqlCatalog.

No ready-made REST catalog server installs from the package registries the tests can reach, so
this one serves the REST routes over pyiceberg's own catalog logic: every request body is parsed
with pyiceberg's request models, and every operation is a call on its `SqlCatalog`. A commit is
`SqlCatalog.commit_table(table, requirements, updates)`: pyiceberg checks the requirements
against the current metadata, applies the updates, writes the new metadata file and swaps the
pointer with a compare-and-swap on the catalog row. This file applies nothing by hand.

Routes (the REST spec's, under `/v1/{prefix}`): the config endpoint; namespaces (list, create,
load, exists); tables (list, create, load, exists, commit, drop); `POST /v1/oauth/tokens` with
the client-credentials grant. Every route but the token endpoint needs a bearer token: one the
token endpoint issued (for `--token-ttl` seconds), or the `--token` given at start.

    python iceberg_rest.py --port 0 --warehouse s3://bucket/wh --db sqlite:////tmp/catalog.db \
        --client-id ID --client-secret SECRET [--token TOKEN] [--prefix P] [--io KEY=VALUE]... \
        [--token-ttl SECONDS] [--table-config KEY=VALUE]... [--exit-on-stdin-eof]

It prints the port it listens on, alone on a line, once it accepts connections.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import pydantic
from pyiceberg.catalog.rest import CreateTableRequest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import (
    CommitFailedException,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import CommitTableRequest
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

# The separator of a multi-level namespace in a URL path, as the REST spec defines it.
NAMESPACE_SEPARATOR = "\x1f"


class Refused(Exception):
    """A request answered with an Iceberg error body."""

    def __init__(self, code: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.kind = kind


# pyiceberg's exceptions and the REST error each one is.
ERRORS: list[tuple[type[BaseException], int, str]] = [
    (NoSuchTableError, 404, "NoSuchTableException"),
    (NoSuchNamespaceError, 404, "NoSuchNamespaceException"),
    (TableAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceAlreadyExistsError, 409, "AlreadyExistsException"),
    (NamespaceNotEmptyError, 409, "NamespaceNotEmptyException"),
    (CommitFailedException, 409, "CommitFailedException"),
    (pydantic.ValidationError, 400, "BadRequestException"),
    (ValueError, 400, "BadRequestException"),
]


class OAuthRefused(Refused):
    """A token request refused with an OAuth2 error body (RFC 6749 section 5.2)."""


class Tokens:
    """Bearer tokens: the one given at start, and those the token endpoint issued."""

    def __init__(self, static: str | None, ttl: float, told: float | None) -> None:
        self.static = static
        self.ttl = ttl
        # What `expires_in` says; a test sets it longer than `ttl` to meet a client that holds
        # an expired token.
        self.told = ttl if told is None else told
        self.issued: dict[str, float] = {}
        self.lock = threading.Lock()

    def issue(self) -> str:
        token = secrets.token_urlsafe(24)
        with self.lock:
            self.issued[token] = time.monotonic() + self.ttl
        return token

    def check(self, header: str | None) -> None:
        if not header or not header.lower().startswith("bearer "):
            raise Refused(401, "NotAuthorizedException", "a bearer token is required")
        token = header[len("bearer ") :].strip()
        if self.static is not None and secrets.compare_digest(token, self.static):
            return
        with self.lock:
            expiry = self.issued.get(token)
        if expiry is None:
            raise Refused(401, "NotAuthorizedException", "the bearer token is not one this server issued")
        if time.monotonic() > expiry:
            raise Refused(401, "NotAuthorizedException", "the bearer token has expired")


class Server:
    """What the handler needs: the catalog, the credentials and the served names."""

    def __init__(self, args: argparse.Namespace) -> None:
        io = dict(pair.split("=", 1) for pair in args.io)
        self.catalog = SqlCatalog(args.catalog_name, uri=args.db, warehouse=args.warehouse, **io)
        self.warehouse = args.warehouse
        self.prefix = args.prefix
        self.client_id = args.client_id
        self.client_secret = args.client_secret
        self.tokens = Tokens(args.token, args.token_ttl, args.expires_in)
        self.table_config = dict(pair.split("=", 1) for pair in args.table_config)


class Handler(BaseHTTPRequestHandler):
    server_version = "tributary-test-iceberg-rest"
    protocol_version = "HTTP/1.1"
    state: Server

    def do_GET(self) -> None:
        self.serve("GET")

    def do_HEAD(self) -> None:
        self.serve("HEAD")

    def do_POST(self) -> None:
        self.serve("POST")

    def do_DELETE(self) -> None:
        self.serve("DELETE")

    def serve(self, method: str) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            if method == "POST" and url.path == "/v1/oauth/tokens":
                return self.reply(200, self.token(body))
            self.state.tokens.check(self.headers.get("Authorization"))
            if method == "GET" and url.path == "/v1/config":
                return self.reply(200, self.config(parse_qs(url.query)))
            status, answer = self.route(method, url.path, parse_qs(url.query), body)
            self.reply(status, answer)
        except OAuthRefused as refused:
            self.reply(refused.code, {"error": refused.kind, "error_description": str(refused)})
        except Refused as refused:
            self.error(refused.code, refused.kind, str(refused))
        except Exception as error:  # noqa: BLE001 - every failure becomes an Iceberg error body
            for kind, code, name in ERRORS:
                if isinstance(error, kind):
                    return self.error(code, name, str(error))
            traceback.print_exc()
            # A commit that failed in an unexpected way may or may not have swapped the pointer.
            name = "CommitStateUnknownException" if method == "POST" else "InternalServerError"
            self.error(500, name, f"{type(error).__name__}: {error}")

    def token(self, body: bytes) -> dict[str, Any]:
        form = {key: values[0] for key, values in parse_qs(body.decode()).items()}
        client_id, client_secret = form.get("client_id"), form.get("client_secret")
        basic = self.headers.get("Authorization") or ""
        if basic.lower().startswith("basic "):
            pair = base64.b64decode(basic[len("basic ") :]).decode()
            client_id, _, client_secret = pair.partition(":")
        if form.get("grant_type") != "client_credentials":
            raise OAuthRefused(400, "unsupported_grant_type", "only the client_credentials grant is served")
        if client_id != self.state.client_id or not secrets.compare_digest(
            client_secret or "", self.state.client_secret or ""
        ):
            raise OAuthRefused(401, "invalid_client", "the client id or secret is wrong")
        return {
            "access_token": self.state.tokens.issue(),
            "token_type": "bearer",
            "expires_in": int(self.state.tokens.told),
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
        }

    def config(self, query: dict[str, list[str]]) -> dict[str, Any]:
        asked = query.get("warehouse", [None])[0]
        if asked is not None and asked != self.state.warehouse:
            raise Refused(404, "NoSuchWarehouseException", f"warehouse {asked} is not served here")
        return {"defaults": {}, "overrides": {"prefix": self.state.prefix, "warehouse": self.state.warehouse}}

    def route(self, method: str, path: str, query: dict[str, list[str]], body: bytes) -> tuple[int, Any]:
        parts = path.split("/")
        # ['', 'v1', prefix, 'namespaces', ns?, 'tables'?, table?]
        if len(parts) < 4 or parts[1] != "v1" or parts[2] != self.state.prefix or parts[3] != "namespaces":
            raise Refused(404, "NoSuchRouteException", f"no route {method} {path}")
        rest = parts[4:]
        catalog = self.state.catalog
        if not rest:
            if method == "GET":
                parent = query.get("parent", [None])[0]
                found = catalog.list_namespaces(namespace(parent) if parent else ())
                return 200, {"namespaces": [list(item) for item in found]}
            if method == "POST":
                request = json.loads(body)
                name = tuple(request["namespace"])
                catalog.create_namespace(name, request.get("properties") or {})
                return 200, {"namespace": list(name), "properties": catalog.load_namespace_properties(name)}
        ns = namespace(rest[0])
        if len(rest) == 1:
            return self.namespace_route(method, ns)
        if rest[1] == "tables" and len(rest) == 2:
            if method == "GET":
                return 200, {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in catalog.list_tables(ns)]}
            if method == "POST":
                return 200, self.create_table(ns, body)
        if rest[1] == "tables" and len(rest) == 3:
            return self.table_route(method, ns, unquote(rest[2]), body)
        raise Refused(404, "NoSuchRouteException", f"no route {method} {path}")

    def namespace_route(self, method: str, ns: tuple[str, ...]) -> tuple[int, Any]:
        catalog = self.state.catalog
        if method == "HEAD":
            return (204, None) if catalog.namespace_exists(ns) else (404, None)
        if method == "GET":
            return 200, {"namespace": list(ns), "properties": catalog.load_namespace_properties(ns)}
        if method == "DELETE":
            catalog.drop_namespace(ns)
            return 204, None
        raise Refused(405, "BadRequestException", f"{method} is not served on a namespace")

    def table_route(self, method: str, ns: tuple[str, ...], name: str, body: bytes) -> tuple[int, Any]:
        catalog = self.state.catalog
        identifier = (*ns, name)
        if method == "HEAD":
            return (204, None) if catalog.table_exists(identifier) else (404, None)
        if method == "GET":
            return 200, self.loaded(catalog.load_table(identifier))
        if method == "DELETE":
            catalog.drop_table(identifier)
            return 204, None
        if method == "POST":
            request = json.loads(body)
            # The identifier is optional in the REST spec and required by pyiceberg's model.
            request.setdefault("identifier", {"namespace": list(ns), "name": name})
            commit = CommitTableRequest.model_validate(request)
            table = catalog.load_table(identifier)
            response = catalog.commit_table(table, commit.requirements, commit.updates)
            return 200, {
                "metadata-location": response.metadata_location,
                "metadata": json.loads(response.metadata.model_dump_json()),
            }
        raise Refused(405, "BadRequestException", f"{method} is not served on a table")

    def create_table(self, ns: tuple[str, ...], body: bytes) -> dict[str, Any]:
        request = json.loads(body)
        # Optional in the REST spec, required (though nullable) in pyiceberg's model.
        for key in ("location", "partition-spec", "write-order"):
            request.setdefault(key, None)
        create = CreateTableRequest.model_validate(request)
        if create.stage_create:
            raise Refused(400, "BadRequestException", "staged creates are not served")
        table = self.state.catalog.create_table(
            (*ns, create.name),
            schema=create.table_schema,
            location=create.location,
            partition_spec=create.partition_spec or UNPARTITIONED_PARTITION_SPEC,
            sort_order=create.write_order or UNSORTED_SORT_ORDER,
            properties=create.properties,
        )
        return self.loaded(table)

    def loaded(self, table: Any) -> dict[str, Any]:
        return {
            "metadata-location": table.metadata_location,
            "metadata": json.loads(table.metadata.model_dump_json()),
            "config": self.state.table_config,
        }

    def reply(self, status: int, answer: Any) -> None:
        data = b"" if answer is None else json.dumps(answer).encode()
        self.send_response(status)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def error(self, code: int, kind: str, message: str) -> None:
        self.reply(code, {"error": {"message": message, "type": kind, "code": code}})


def namespace(text: str) -> tuple[str, ...]:
    return tuple(unquote(text).split(NAMESPACE_SEPARATOR))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--warehouse", required=True, help="where new tables go, e.g. s3://bucket/wh")
    parser.add_argument("--db", required=True, help="SQLAlchemy URL of the catalog database")
    parser.add_argument("--catalog-name", default="rest")
    parser.add_argument("--prefix", default="tributary")
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--token", help="a bearer token accepted besides the issued ones")
    parser.add_argument("--token-ttl", type=float, default=3600, help="seconds an issued token is good for")
    parser.add_argument("--expires-in", type=float, help="the expires_in told with a token (default: --token-ttl)")
    parser.add_argument("--io", action="append", default=[], help="FileIO property KEY=VALUE")
    parser.add_argument(
        "--table-config", action="append", default=[], help="KEY=VALUE answered in a loaded table's config"
    )
    parser.add_argument(
        "--exit-on-stdin-eof", action="store_true", help="stop when standard input closes (its parent died)"
    )
    args = parser.parse_args()

    Handler.state = Server(args)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    if args.exit_on_stdin_eof:
        threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
