"""Argument parsers the ``difftaxel`` commands share (each names the flag in its message)."""

from __future__ import annotations

import argparse

__all__ = ["positive", "fraction", "holdout", "fraction_in"]


def positive(kind, name, strict=True):
    """A parser of a ``kind`` (int, float) value > 0 (>= 0 when not ``strict``), named ``name``
    in argparse's messages."""

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


def fraction_in(low_open: bool):
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

    parse.__doc__ = "Parse a fraction in " + ("(0, 1]" if low_open else "[0, 1)") + "."
    return parse


#: a fraction in (0, 1]
fraction = fraction_in(low_open=True)
#: a fraction in [0, 1)
holdout = fraction_in(low_open=False)
