"""Argument parsers the ``difftaxel`` commands share (each names the flag in its message)."""

from __future__ import annotations

import argparse

__all__ = ["_positive", "_fraction", "_holdout", "_fraction_in"]


def _positive(kind, name, strict=True):
    def parse(text):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not (v > 0 if strict else v >= 0) or v != v:
            rel = "> 0" if strict else ">= 0"
            raise argparse.ArgumentTypeError(f"expected {rel}, got {text}")
        return v

    parse.__name__ = name
    return parse


def _fraction_in(low_open: bool):
    """A parser of a fraction in (0, 1] (``low_open``) or in [0, 1)."""

    def parse(text):
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        ok = 0.0 < v <= 1.0 if low_open else 0.0 <= v < 1.0
        if not ok:
            span = "(0, 1]" if low_open else "[0, 1)"
            raise argparse.ArgumentTypeError(f"expected a fraction in {span}, got {text}")
        return v

    return parse


_fraction = _fraction_in(low_open=True)
_holdout = _fraction_in(low_open=False)
