"""``race serve``: its flags (address, bounds, injected faults) and command; ``race.cli.main``
registers it with ``add_serve_command``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from race.cli.arguments import port, seconds
from rsc import InputError


def positive(text: str) -> int:
    """A whole number at least 1."""
    if not text.isdigit() or len(text) > 12 or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number at least 1")
    return int(text)


def cmd_serve(args: argparse.Namespace) -> int:
    from race.serving.limits import Limits
    from race.serving.serve import loopback_host, serve
    from race.serving.service import Faults

    loopback_host(args.host)
    if args.fault_status is not None and not 400 <= args.fault_status <= 599:
        raise InputError(f"{args.fault_status} is not an HTTP error status (400-599)", where="--fault-status")
    faults = Faults(
        delay_ms=args.fault_delay_ms,
        status=args.fault_status,
        truncate=args.fault_truncate,
        drop=args.fault_drop,
        first=args.fault_first,
    )
    limits = Limits(
        max_concurrency=args.max_concurrency,
        max_queue=args.max_queue,
        queue_timeout_s=args.queue_timeout,
        max_connections=args.max_connections,
        backlog=args.backlog,
        header_timeout_s=args.header_timeout,
        body_timeout_s=args.body_timeout,
        idle_timeout_s=args.idle_timeout,
        max_body_bytes=args.max_body_bytes,
        max_header_bytes=args.max_header_bytes,
        max_headers=args.max_headers,
    )

    def announce(url: str) -> None:
        print(url, flush=True)
        note = f"race serve: {args.index} on {url} (faults: {faults.describe()}); SIGTERM or Ctrl-C stops"
        print(note, file=sys.stderr)

    serve(Path(args.index), host=args.host, port=args.port, faults=faults, limits=limits, announce=announce)
    return 0


def add_serve_command(sub: Any) -> None:
    from race.serving.limits import DEFAULT_LIMITS as d

    p = sub.add_parser("serve", help="serve an index's contracts over HTTP on loopback (race.remote/1)")
    p.add_argument("--index", required=True, help="index directory built by `race index`")
    p.add_argument("--port", type=port, default=0, help="TCP port (0: an ephemeral port, printed on stdout)")
    p.add_argument("--host", default="127.0.0.1", help="loopback address to bind (only 127.0.0.0/8)")
    b = p.add_argument_group("bounds (over a bound: a protocol JSON error, never a hang)")
    bounds: list[tuple[str, Any, Any, str, str]] = [
        ("--max-concurrency", positive, d.max_concurrency, "N", "requests handled at once"),
        ("--max-queue", positive, d.max_queue, "N", "requests waiting for a slot; one more gets 503"),
        ("--queue-timeout", seconds, d.queue_timeout_s, "S", "longest wait for a slot, then 503"),
        ("--max-connections", positive, d.max_connections, "N", "open connections; one more gets 503"),
        ("--backlog", positive, d.backlog, "N", "listen backlog"),
        ("--header-timeout", seconds, d.header_timeout_s, "S", "time to a complete request head, then 408"),
        ("--body-timeout", seconds, d.body_timeout_s, "S", "time to a complete request body, then 408"),
        ("--idle-timeout", positive, d.idle_timeout_s, "S", "whole seconds an idle kept-alive connection stays open"),
        ("--max-body-bytes", positive, d.max_body_bytes, "N", "request body size; over it 413"),
        ("--max-header-bytes", positive, d.max_header_bytes, "N", "request line and headers; over them 431"),
        ("--max-headers", positive, d.max_headers, "N", "request header count; over it 431"),
    ]
    for flag, kind, default, metavar, text in bounds:
        shown = f"{default:g}" if isinstance(default, float) else str(default)
        b.add_argument(flag, type=kind, default=default, metavar=metavar, help=f"{text} (default {shown})")
    faults = p.add_argument_group("fault injection (tests only; off by default; POST /v1/scan only)")
    faults.add_argument("--fault-delay-ms", type=int, default=0, metavar="N", help="wait N ms before answering")
    faults.add_argument("--fault-status", type=int, metavar="CODE", help="answer with this HTTP error status")
    faults.add_argument("--fault-truncate", action="store_true", help="send only half the body, then close")
    faults.add_argument("--fault-drop", action="store_true", help="close the connection without answering")
    faults.add_argument("--fault-first", type=int, default=0, metavar="N", help="fault only the first N scans")
    p.set_defaults(func=cmd_serve)
