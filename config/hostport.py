"""The one ``HOST:PORT`` parser (config, worker and models CLIs, worker registration, the worker
server)."""
from __future__ import annotations

import argparse


def split_hostport(text: str) -> tuple[str, int]:
    """``HOST:PORT`` -> (host, port); raises ValueError with one line."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host, int(port)


def hostport_arg(text: str) -> str:
    """:func:`split_hostport` as an argparse ``type`` (``--dispatcher``, ``--listen``): the text,
    stripped, or the parser's one usage line."""
    try:
        split_hostport(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text.strip()
