#!/usr/bin/env python3
"""A stand-in for the GitHub CLI (`gh`) with GitHub's semantics for what the publishing jobs run, over a folder
($GH_STANDIN_DIR): `python -m ci rehearse` and the tests put it on PATH as `gh`.

    releases.json        [{tagName, isDraft, createdAt, name, body}] in creation order
    <tag>/               the release's assets
    api/<path>.json      the answer of `gh api <path>` (the query string dropped), written by whoever sets it up

What GitHub refuses, this refuses too: `release create` of an existing tag, `release upload` of an asset name the
release has (unless --clobber, which replaces it), `release download` over an existing file. `release view --json
assets` gives each asset's name, size and digest ("sha256:<hex>", as GitHub's REST API gives it; set
GH_STANDIN_NO_DIGEST=1 for a CLI that does not pass it on). Standard library only."""

import fnmatch
import hashlib
import json
import os
import shutil
import sys

ROOT = os.environ.get("GH_STANDIN_DIR", "")
LIST = os.path.join(ROOT, "releases.json")


def releases():
    return json.load(open(LIST)) if os.path.exists(LIST) else []


def save(rels):
    with open(LIST, "w") as f:
        json.dump(rels, f, indent=2)


def option(args, name, default=None):
    return args[args.index(name) + 1] if name in args else default


def positional(args, flags_with_values):
    """The arguments that are neither flags nor a flag's value."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a.startswith("--"):
            skip = a in flags_with_values
        else:
            out.append(a)
    return out


def fail(message):
    print(message, file=sys.stderr)
    return 1


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def asset(folder, name):
    entry = {"name": name, "size": os.path.getsize(os.path.join(folder, name))}
    if not os.environ.get("GH_STANDIN_NO_DIGEST"):
        entry["digest"] = "sha256:" + sha256(os.path.join(folder, name))
    return entry


def release(args):
    cmd, rest = args[0], args[1:]
    rels = releases()
    if cmd == "list":
        fields = option(rest, "--json", "tagName").split(",")
        print(json.dumps([{k: r.get(k) for k in fields} for r in reversed(rels)]))  # newest first, as gh lists
        return 0
    (tag, *files) = positional(
        rest, {"--json", "--title", "--notes", "--notes-file", "--pattern", "--dir", "--limit", "--target"}
    )
    known = {r["tagName"]: r for r in rels}
    folder = os.path.join(ROOT, tag)
    if cmd == "create":
        if tag in known:
            return fail(f"HTTP 422: Validation Failed: tag_name already_exists (a release of {tag} exists)")
        notes = open(option(rest, "--notes-file")).read() if "--notes-file" in rest else option(rest, "--notes", "")
        os.makedirs(folder, exist_ok=True)
        save(
            rels
            + [
                {
                    "tagName": tag,
                    "isDraft": "--draft" in rest,
                    "createdAt": f"2026-12-{len(rels) + 1:02d}T00:00:00Z",
                    "name": option(rest, "--title", tag),
                    "body": notes,
                }
            ]
        )
        return 0
    if tag not in known:
        return fail("release not found")
    if cmd == "view":
        if "--json" in rest:
            fields = option(rest, "--json").split(",")
            view = dict(known[tag], assets=[asset(folder, n) for n in sorted(os.listdir(folder))])
            print(json.dumps({k: view.get(k) for k in fields}))
        else:
            print(f"title:\t{known[tag]['name']}\ntag:\t{tag}\n--\n{known[tag]['body']}")
        return 0
    if cmd == "edit":
        if "--notes-file" in rest:
            known[tag]["body"] = open(option(rest, "--notes-file")).read()
        save(rels)
        return 0
    if cmd == "upload":
        names = [os.path.basename(p.split("#")[0]) for p in files]
        present = sorted(n for n in names if os.path.exists(os.path.join(folder, n)))
        if present and "--clobber" not in rest:
            return fail(f"asset under the same name already exists: {present}")
        for path in files:
            shutil.copy(path.split("#")[0], folder)
        return 0
    if cmd == "download":
        pattern, dest = option(rest, "--pattern", "*"), option(rest, "--dir", ".")
        matched = [n for n in sorted(os.listdir(folder)) if fnmatch.fnmatch(n, pattern)]
        if not matched:
            return fail(f"no assets match the file pattern {pattern}")
        os.makedirs(dest, exist_ok=True)
        for n in matched:
            if os.path.exists(os.path.join(dest, n)) and "--clobber" not in rest and "--skip-existing" not in rest:
                return fail(f"{os.path.join(dest, n)} already exists (use `--clobber` to overwrite)")
            shutil.copy(os.path.join(folder, n), dest)
        return 0
    return fail(f"gh stand-in: no `release {cmd}`")


def api(args):
    (path,) = positional(args, {"--jq", "-q", "--method", "-X", "-H", "--header", "-f", "-F"})
    stored = os.path.join(ROOT, "api", path.split("?")[0].strip("/") + ".json")
    if not os.path.exists(stored):
        return fail(f"HTTP 404: Not Found (https://api.github.com/{path}): the stand-in has no {stored}")
    sys.stdout.write(open(stored).read())
    return 0


def main(args):
    if not ROOT:
        return fail("gh stand-in: set GH_STANDIN_DIR to the folder that holds its releases")
    if args[:1] == ["release"] and len(args) > 1:
        return release(args[1:])
    if args[:1] == ["api"]:
        return api(args[1:])
    return fail(f"gh stand-in: no `{' '.join(args[:2])}`")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
