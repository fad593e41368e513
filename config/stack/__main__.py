"""``python -m config.stack render``: the stack's template as YAML on stdout (what
``config/stack/costscale-stack.yaml`` must equal; a test checks it); ``python -m config.stack path``:
where the installed package keeps it (for ``aws cloudformation deploy --template-file``)."""
from __future__ import annotations

import sys

from config.stack import TEMPLATE_PATH
from config.stack.template import render_yaml


def main(argv: list[str]) -> int:
    if argv == ["render"]:
        sys.stdout.write(render_yaml())
        return 0
    if argv == ["path"]:
        print(TEMPLATE_PATH)
        return 0
    print("usage: python -m config.stack {render|path}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
