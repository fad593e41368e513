"""``python -m config.iam NAME key=value ...``: the shipped document NAME with its placeholders
filled, as JSON on stdout (for ``aws iam put-role-policy --policy-document file://...``); one line
and exit 2 for an unknown document or a missing value."""
from __future__ import annotations

import json
import sys

from config.iam import DOCUMENTS, load, render


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in DOCUMENTS:
        print(f"usage: python -m config.iam {{{'|'.join(DOCUMENTS)}}} key=value ...", file=sys.stderr)
        return 2
    values = dict(a.split("=", 1) for a in argv[1:] if "=" in a)
    try:
        doc = render(load(argv[0]), values)
    except KeyError as exc:
        print(f"config.iam {argv[0]}: {exc.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(doc, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
