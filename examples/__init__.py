"""Worked examples (``examples/mailroom.py``); a package, so that ``--env examples.mailroom:CHAPTER`` finds them."""
