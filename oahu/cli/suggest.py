"""``oahu suggest``: ask a running ``oahu run`` which triplets to label next (``POST /v1/suggest``).

Prints one question per line, ``anchor first second score`` separated by tabs (ids never hold
control characters), or the service's JSON answer with ``--json``; a summary goes to stderr.
A question asks whether the anchor is more similar to first or to second; the answer goes back
to the input stream as an ordinary triplet message (docs/active-learning-service.md).

Exit status: 0 answered, 1 the service could not be reached or could not answer now (503, 5xx:
worth retrying), 2 the request was refused (4xx: the message names the field).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from oahu.cli.argument_types import integer_at_least

STRATEGIES = ("joint-entropy", "uncertainty", "random")  # the service's (its OpenAPI schema)
TOKEN_ENV = "OAHU_AUTH_TOKEN"  # the variable `oahu run` reads its --auth-token from too


class Refused(Exception):
    """The service answered 4xx; ``str`` says why, naming the field."""


class Unavailable(Exception):
    """The service could not be reached, or could not answer now (503, 5xx)."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "suggest",
        help="ask a running service which triplets to label next",
        description="Ask a running `oahu run` (POST /v1/suggest) for the triplet questions whose "
        "answers would teach its model most: is the anchor more similar to first or to second? "
        "Prints one question per line (anchor, first, second, score; tab-separated), or the "
        "JSON answer with --json. Exit status 1: service unreachable or unavailable; 2: request "
        "refused.",
    )
    parser.add_argument(
        "--url", required=True, metavar="http://HOST:PORT", help="the service's HTTP address"
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help=f"the service's --auth-token, if it has one (default: ${TOKEN_ENV})",
    )
    parser.add_argument(
        "--batch",
        required=True,
        # Refused before any request: asking for no question is a mistake whether or not the
        # service is up. The upper bound is the service's own, and it names it.
        type=integer_at_least(1),
        metavar="K",
        help="questions wanted (1 to 1000; the service refuses more)",
    )
    pool = parser.add_mutually_exclusive_group()
    pool.add_argument(
        "--pool",
        choices=("gallery",),
        default="gallery",
        help="ask about the service's gallery (default)",
    )
    pool.add_argument(
        "--ids",
        metavar="FILE",
        help="ask about these items: a file of item ids, one per line (- for stdin; blank lines "
        "and lines starting with # are skipped)",
    )
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="joint-entropy",
        help="how questions are chosen (default: joint-entropy)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the selection (default: one the service draws)",
    )
    parser.add_argument(
        "--timeout", type=float, default=120.0, metavar="SECONDS", help="(default: 120)"
    )
    parser.add_argument("--json", action="store_true", help="print the service's JSON answer")
    parser.set_defaults(func=suggest)


def read_ids(path: str) -> list[str]:
    """Item ids, one per line, from ``path`` (``-``: stdin)."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    ids = [line.strip() for line in text.splitlines()]
    return [i for i in ids if i and not i.startswith("#")]


def refusal(status: int, body: Any) -> str:
    """What a 4xx answer says, naming the fields the service named.

    >>> refusal(422, {"detail": [{"loc": ["body", "pool", 3], "msg": "unknown item id 'x'"}]})
    "pool[3]: unknown item id 'x'"
    >>> refusal(401, {"detail": "a valid bearer token is required"})
    'a valid bearer token is required (give --token or set OAHU_AUTH_TOKEN)'
    """
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, list):
        lines = []
        for error in detail:
            loc = [part for part in error.get("loc", []) if part != "body"]
            field = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
            lines.append(f"{field or 'request'}: {error.get('msg', error)}")
        return "; ".join(lines)
    text = str(detail) if detail is not None else f"HTTP {status}"
    if status == 401:
        text += f" (give --token or set {TOKEN_ENV})"
    return text


def request_suggestions(
    url: str, body: dict[str, Any], token: str | None = None, timeout: float = 120.0
) -> dict[str, Any]:
    """POST ``body`` to ``url``/v1/suggest; the JSON answer, or :class:`Refused` /
    :class:`Unavailable` saying why not."""
    endpoint = url.rstrip("/") + "/v1/suggest"
    if not endpoint.startswith(("http://", "https://")):
        raise Refused(f"url: expected http://HOST:PORT, got {url!r}")
    headers = {"content-type": "application/json", "accept": "application/json"}
    if token:
        headers["authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        endpoint, data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = {"detail": raw.decode(errors="replace")[:500] or exc.reason}
        if 400 <= exc.code < 500:
            raise Refused(f"the service refused the request: {refusal(exc.code, answer)}") from None
        raise Unavailable(f"the service answered {exc.code}: {refusal(exc.code, answer)}") from None
    except (urllib.error.URLError, OSError) as exc:  # refused, unknown host, timeout
        reason = getattr(exc, "reason", exc)
        raise Unavailable(f"cannot reach the service at {url}: {reason}") from None


def suggest(args: argparse.Namespace) -> int:
    if not args.timeout > 0:  # urllib's own words ("Timeout value out of range") name nothing
        raise ValueError(f"timeout: must be > 0 seconds, got {args.timeout}")
    pool: Any = read_ids(args.ids) if args.ids else args.pool
    body: dict[str, Any] = {
        "pool": pool,
        "batch": args.batch,
        "kind": "triplet",
        "strategy": args.strategy,
    }
    if args.seed is not None:
        body["seed"] = args.seed
    token = args.token if args.token is not None else os.environ.get(TOKEN_ENV)
    try:
        answer = request_suggestions(args.url, body, token, args.timeout)
    except Refused as exc:
        print(f"oahu suggest: error: {exc}", file=sys.stderr)
        return 2
    except Unavailable as exc:
        print(f"oahu suggest: error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        for q in answer["suggestions"]:
            print(f"{q['anchor']}\t{q['first']}\t{q['second']}\t{q['score']:.6g}")
    model = answer.get("model", {})
    print(
        f"oahu suggest: {len(answer['suggestions'])} questions ({answer.get('strategy')}, seed "
        f"{answer.get('seed')}) from {answer.get('pool_items')} items, snapshot "
        f"{model.get('snapshot')} ({model.get('updates')} updates), "
        f"{answer.get('seconds', 0.0):.2f} s",
        file=sys.stderr,
    )
    return 0
