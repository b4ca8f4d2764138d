#!/usr/bin/env python3
"""A stand-in for the GitHub CLI's `gh release` commands the workflow runs, over a folder ($FAKE_GH): one
subfolder per release holding its assets, releases.json listing {tagName, isDraft, createdAt} in creation order."""
import json
import os
import shutil
import sys

ROOT = os.environ["FAKE_GH"]
LIST = os.path.join(ROOT, "releases.json")


def releases():
    return json.load(open(LIST)) if os.path.exists(LIST) else []


def main(args):
    assert args[0] == "release", args
    cmd, tag, rest = args[1], (args[2] if len(args) > 2 else None), args[3:]
    known = {r["tagName"]: r for r in releases()}
    if cmd == "list":
        print(json.dumps(releases()))
        return 0
    if cmd in ("view", "download", "upload") and tag not in known:
        print("release not found", file=sys.stderr)
        return 1
    folder = os.path.join(ROOT, tag)
    if cmd == "view":
        if "--json" in rest:
            print(json.dumps({"assets": [{"name": n} for n in sorted(os.listdir(folder))]}))
        return 0
    if cmd == "create":
        os.makedirs(folder, exist_ok=True)
        json.dump(releases() + [{"tagName": tag, "isDraft": False, "createdAt": f"2026-12-{len(known) + 1:02d}"}],
                  open(LIST, "w"))
        return 0
    if cmd == "upload":
        for path in (a for a in rest if not a.startswith("--")):
            shutil.copy(path, folder)
        return 0
    if cmd == "download":
        pattern, dest = rest[rest.index("--pattern") + 1], rest[rest.index("--dir") + 1]
        if not os.path.exists(os.path.join(folder, pattern)):
            print(f"no assets match the file pattern {pattern}", file=sys.stderr)
            return 1
        shutil.copy(os.path.join(folder, pattern), dest)
        return 0
    print(f"fake gh: no {cmd}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
