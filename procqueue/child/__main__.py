"""``python -m procqueue.child``: a child (``SPEC INDEX PARENT RFD WFD``)
or, with ``--template``, a fork server's template that forks children."""

from __future__ import annotations

import sys

from procqueue.child import serve, template


def main(argv: list[str]) -> int:
    """Runs the process the arguments name; returns its exit code."""
    if argv[:1] == ["--template"]:
        return template.template_main(argv[1:])
    return serve.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
