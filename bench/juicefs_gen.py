#!/usr/bin/env python3
"""Synthetic JuiceFS metadata dump for bench/metadump-juicefs.sh (stdlib only).

  juicefs_gen.py TEMPLATE.json --files N [--per-dir 1000] -o OUT.json

Writes, in the JSON format of `juicefs dump`, a volume of N empty regular
files in directories of --per-dir (d0000000/f0000000 ..., the layout of
`cairn gen-dump`), hanging off the root. TEMPLATE.json is `juicefs dump` of
a freshly formatted volume: its Setting (name, UUID, storage, bucket, ...),
its session counter and the attributes of its root and trash directory are
kept, so `juicefs load` makes of OUT.json the volume formatted there with
the files in it. Inodes are numbered as `cairn gen-dump` numbers them: the
root 1, then each directory followed by its files.

Only empty files: JuiceFS keeps no file data in its metadata, so a file of
1 KiB would need a slice whose block is an object in the data store.

The text is laid out as `juicefs dump` lays it out (same indentation, one
attr object a line), so the dump file sizes of a load and of a dump of the
loaded volume compare.
"""
import argparse
import json
import sys

BLOCK = 4096  # JuiceFS counts an empty inode as 4 KiB of used space


def attr_json(a):
    """An attr object as Go's json.Marshal writes it: no spaces, the
    fields of DumpedAttr in order, the omitempty ones left out at zero."""
    fields = ["inode", "flags", "type", "mode", "uid", "gid", "atime", "mtime", "ctime",
              "atimensec", "mtimensec", "ctimensec", "nlink", "length", "rdev"]
    omit = {"flags", "atimensec", "mtimensec", "ctimensec", "rdev"}
    parts = []
    for k in fields:
        v = a.get(k, 0)
        if k in omit and not v:
            continue
        parts.append(f'"{k}":{json.dumps(v)}')
    return "{" + ",".join(parts) + "}"


def generate(template, files, per_dir, out):
    setting = template["Setting"]
    root = dict(template["FSTree"]["attr"])
    trash = template.get("Trash")
    dirs = (files + per_dir - 1) // per_dir
    last = 1 + dirs + files  # highest inode
    counters = {
        "usedSpace": BLOCK * (dirs + files),
        "usedInodes": dirs + files,
        "nextInodes": last + 1,
        "nextChunk": 1,
        "nextSession": template["Counters"].get("nextSession", 0),
        "nextTrash": 0,
    }
    head = json.dumps({"Setting": setting, "Counters": counters, "Sustained": [], "DelFiles": []}, indent=2)
    w = out.write
    w(head[:-2] + ",")  # drop the closing "\n}", as juicefs dump does, and go on with the tree
    times = {k: root.get(k, 0) for k in ("atime", "mtime", "ctime", "atimensec", "mtimensec", "ctimensec")}
    root.update(inode=1, type="directory", nlink=2 + dirs, length=0)
    w(f'\n  "FSTree": {{\n    "attr": {attr_json(root)},\n    "entries": {{')
    dir_attr = dict(times, type="directory", mode=0o755, uid=0, gid=0, length=0)
    file_attr = attr_json(dict(times, inode=0, type="regular", mode=0o644, uid=0, gid=0, nlink=1, length=0))
    # The file's attr with its inode left as a format field.
    pre, post = file_attr.split('"inode":0', 1)
    file_fmt = '\n          "f%07d": {\n            "attr": ' + pre.replace("%", "%%") + '"inode":%d' + \
        post.replace("%", "%%") + "\n          }"
    ino = 2
    for d in range(dirs):
        n = min(per_dir, files - d * per_dir)
        a = attr_json(dict(dir_attr, inode=ino, nlink=2))
        w(("," if d else "") + f'\n      "d{d:07d}": {{\n        "attr": {a},\n        "entries": {{')
        first = ino + 1
        w(",".join(file_fmt % (f, first + f) for f in range(n)))
        w("\n        }\n      }")
        ino = first + n
    w("\n    }\n  }")
    if trash:
        t = dict(trash["attr"], nlink=2)  # its own inode (TrashInode)
        w(f',\n  "Trash": {{\n    "attr": {attr_json(t)},\n    "entries": {{\n    }}\n  }}')
    w("\n}\n")
    return last


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("template", help="juicefs dump of a freshly formatted volume")
    p.add_argument("--files", type=int, required=True, help="regular files (empty)")
    p.add_argument("--per-dir", type=int, default=1000, help="files per directory")
    p.add_argument("-o", "--output", required=True, help="dump file to write")
    args = p.parse_args()
    if args.files <= 0 or args.per_dir <= 0:
        sys.exit("juicefs_gen.py: --files and --per-dir must be positive")
    with open(args.template) as f:
        template = json.load(f)
    if template["FSTree"].get("entries"):
        sys.exit("juicefs_gen.py: the template volume is not empty")
    with open(args.output, "w", buffering=1 << 20) as out:
        generate(template, args.files, args.per_dir, out)


if __name__ == "__main__":
    main()
