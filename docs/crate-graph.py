#!/usr/bin/env python3
"""Draws the workspace's crate graph (normal dependencies between our own crates) from
`cargo metadata`, as DOT on stdout; `dot -Tsvg` turns it into docs/crates.svg:

    python3 docs/crate-graph.py | dot -Tsvg -o docs/crates.svg
"""
import json
import subprocess

meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--no-deps"],
    check=True, capture_output=True, text=True).stdout)
ours = {p["name"]: p for p in meta["packages"]}
print("digraph crates {")
print('  rankdir=LR; node [shape=box, fontname="sans-serif", fontsize=11];')
for name, package in sorted(ours.items()):
    description = (package.get("description") or "").split(":")[0].split(".")[0]
    label = f"{name}\\n{description[:60]}" if description else name
    print(f'  "{name}" [label="{label}"];')
for name, package in sorted(ours.items()):
    for dep in package["dependencies"]:
        if dep["name"] in ours and dep.get("kind") in (None, "build"):
            style = ' [style=dashed, label="build"]' if dep.get("kind") == "build" else ""
            optional = ' [style=dotted, label="optional"]' if dep.get("optional") else ""
            print(f'  "{name}" -> "{dep["name"]}"{style or optional};')
print("}")
