#!/usr/bin/env python3
"""Independent check of a LibriSpeech set in MLPerf's layout, with Python's json and torchaudio.

    manifest_peer.py DATASET_DIR MANIFEST...

For each manifest: whether json.dumps(json.load(f), indent=2) gives the file's exact text (the
reference's convert_librispeech.py writes it with json.dump(indent=2)), then per record the
audio of files[-1].fname decoded by torchaudio (sox_io, normalised to [-1, 1]). Prints one JSON
object per line: {"manifest": name, "redump_identical": bool, "records": n} and, per record,
{"fname", "frames", "channels", "sample_rate", "sum", "sum_sq"}.
"""
import json
import os
import sys

import torchaudio


def main():
    root = sys.argv[1]
    for manifest in sys.argv[2:]:
        with open(manifest) as f:
            text = f.read()
        records = json.loads(text)
        print(json.dumps({"manifest": manifest, "redump_identical": json.dumps(records, indent=2) == text,
                          "records": len(records)}))
        for r in records:
            fname = r["files"][-1]["fname"]
            x, rate = torchaudio.load(os.path.join(root, fname))
            x = x.double()
            print(json.dumps({"fname": fname, "frames": x.shape[1], "channels": x.shape[0], "sample_rate": rate,
                              "sum": float(x.sum()), "sum_sq": float((x * x).sum())}))


if __name__ == "__main__":
    main()
