#!/usr/bin/python3
"""edit_json.py IN OUT PATH=VALUE ...: copies the JSON file IN to OUT with
each dotted PATH (e.g. optimizer.lr) set to the JSON VALUE (e.g. -1,
'"fp3"', '{"name": "sgd", "lr": -1}'). For the manifest schema errors of
test/Run/integrity.test."""
import json
import sys

doc = json.load(open(sys.argv[1]))
for edit in sys.argv[3:]:
    path, value = edit.split("=", 1)
    keys = path.split(".")
    node = doc
    keys = [int(k) if k.isdigit() else k for k in keys]
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = json.loads(value)
json.dump(doc, open(sys.argv[2], "w"), indent=1)
