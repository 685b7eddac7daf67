#!/usr/bin/env python3
"""Per-function machine code of CUDA objects, under names that do not depend on the source file.

Usage:
  sass_functions.py manifest OUT_DIR OBJ:PTXAS_LOG...   writes OUT_DIR/manifest.tsv and
      OUT_DIR/sass/<digest>.sass: one row per device function (name, SASS digest, ptxas stats)
  sass_functions.py compare BASE_DIR NEW_DIR            compares two manifests; exit 1 on a change

A function's name is its demangled name with every "(anonymous namespace)::" removed: nvcc names
an anonymous namespace after the translation unit (file name and a hash), so the same kernel moved
to another file, or a type moved out of an anonymous namespace into a header, keeps its name.
SASS (cuobjdump -sass, instructions and their encodings, which carry the scheduling bits) is
compared after the same renaming of every symbol it mentions, and without the column padding.
A function found in several objects of one tree (a header's __noinline__ helper: its code lies
in its callers' SASS, its frame in the ptxas figures) must be the same in all of them.
"""
import hashlib
import os
import re
import subprocess
import sys

MANGLED = re.compile(r"\b_Z[A-Za-z0-9_$.]+")
ANON = "(anonymous namespace)::"


def demangle_all(names):
    names = sorted(set(names))
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return {m: d.replace(ANON, "") for m, d in zip(names, out)}


def sass_functions(obj):
    """{mangled name: SASS lines} of every function in obj (cuobjdump -sass)."""
    cuobjdump = os.environ.get("CUOBJDUMP", "cuobjdump")
    text = subprocess.run([cuobjdump, "-sass", obj], capture_output=True, text=True,
                          check=True).stdout
    funcs, name = {}, None
    for line in text.splitlines():
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            name = m.group(1)
            funcs[name] = []
        elif name and line.strip().startswith("/*"):
            # Column padding follows the longest instruction of the whole object: not compared.
            funcs[name].append(re.sub(r"\s+", " ", line.strip()))
        elif name and line.strip().startswith("..."):
            name = None
    return funcs


def ptxas_stats(log):
    """{mangled name: 'frame F, spill stores S, spill loads L; registers R, ...'} (-Xptxas -v)."""
    stats, cur = {}, None
    with open(log) as f:
        for line in f:
            m = re.search(r"Compiling entry function '([^']+)'", line)
            if m:
                cur = m.group(1)
                stats[cur] = []
                continue
            # Repeated after every kernel that calls it, for a non-inlined device function.
            m = re.search(r"Function properties for (\S+)", line)
            if m:
                if m.group(1) != cur:
                    cur = m.group(1)
                    stats[cur] = []
                continue
            if cur is None:
                continue
            m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                          line)
            if m:
                stats[cur].append("frame %s, spill stores %s, spill loads %s" % m.groups())
            m = re.search(r"Used (\d+) registers(.*)", line)
            if m:
                # cmem sizes hold the kernel's parameter bytes: kept, they are part of the contract.
                stats[cur].append("registers %s%s" % (m.group(1), m.group(2).rstrip()))
    return {k: "; ".join(v) for k, v in stats.items()}


def manifest(out_dir, pairs):
    os.makedirs(os.path.join(out_dir, "sass"), exist_ok=True)
    rows = {}
    for pair in pairs:
        obj, log = pair.split(":", 1)
        funcs = sass_functions(obj)
        stats = ptxas_stats(log)
        mentioned = list(funcs) + list(stats)
        for lines in funcs.values():
            for line in lines:
                mentioned += MANGLED.findall(line)
        names = demangle_all(mentioned)
        def rename(s):
            return MANGLED.sub(lambda m: names.get(m.group(0), m.group(0)), s)

        for mangled, lines in funcs.items():
            body = "\n".join(rename(l) for l in lines) + "\n"
            digest = hashlib.sha256(body.encode()).hexdigest()[:16]
            with open(os.path.join(out_dir, "sass", digest + ".sass"), "w") as f:
                f.write(body)
            name = names.get(mangled, mangled)
            row = (digest, stats.get(mangled, "no ptxas stats"))
            rows.setdefault(name, set()).add(row)
        # Non-inlined device functions: their code is part of their callers' SASS, their frames here.
        for mangled in set(stats) - set(funcs):
            rows.setdefault(names.get(mangled, mangled), set()).add(("-", stats[mangled]))
    with open(os.path.join(out_dir, "manifest.tsv"), "w") as f:
        for name in sorted(rows):
            for digest, st in sorted(rows[name]):
                f.write("%s\t%s\t%s\n" % (name, digest, st))


def read_manifest(d):
    rows = {}
    with open(os.path.join(d, "manifest.tsv")) as f:
        for line in f:
            name, digest, st = line.rstrip("\n").split("\t")
            rows.setdefault(name, set()).add((digest, st))
    return rows


def compare(base_dir, new_dir):
    base, new = read_manifest(base_dir), read_manifest(new_dir)
    same, changed = 0, []
    for name in sorted(set(base) | set(new)):
        b, n = base.get(name), new.get(name)
        if b is None:
            print("only in NEW:  %s" % name)
        elif n is None:
            print("only in BASE: %s" % name)
        elif len(b) > 1 or len(n) > 1:
            print("not one version in each tree (%d base, %d new): %s" % (len(b), len(n), name))
            changed.append(name)
        elif b == n:
            same += 1
        else:
            (bd, bs), (nd, ns) = next(iter(b)), next(iter(n))
            print("DIFFERS: %s" % name)
            if bs != ns:
                print("  ptxas base: %s\n  ptxas new:  %s" % (bs, ns))
            if bd != nd:
                print("  SASS: diff %s/sass/%s.sass %s/sass/%s.sass" % (base_dir, bd, new_dir, nd))
            changed.append(name)
    only = set(base) ^ set(new)
    print("%d functions identical (SASS and ptxas stats), %d differ, %d in one tree only" %
          (same, len(changed), len(only)))
    return 1 if changed or only else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "manifest":
        manifest(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    else:
        sys.exit(__doc__)
