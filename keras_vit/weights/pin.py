"""Record the SHA-256 of every published checkpoint: `python -m keras_vit.weights.pin` (maintainers).

Streams each file of `keras_vit.weights.CHECKPOINTS` from its official URL
(nothing is kept on disk), hashes it, and writes each digest with the
file's size in bytes to `keras_vit/weights/sha256.json` as
`{"sha256": ..., "size": ...}`, which `fetch` then enforces (the size first,
so a truncated download fails without being hashed). Needs a machine that
reaches storage.googleapis.com; the files total tens of GB. Digests copied
from other public sources are listed with their sources in
docs/sha256_sources.md; a run of this tool replaces them with its own.

    python -m keras_vit.weights.pin                        # every file
    python -m keras_vit.weights.pin --only augreg/B_16-i21k+i1k-224
"""

import argparse
import hashlib
import json
import sys
import urllib.request

from keras_vit.weights import registry


def digest_url(url, timeout=60, chunk=1 << 20):
    """Returns (SHA-256 hex digest, bytes read) of the resource at `url`, streamed.

    Raises:
        ValueError: the transfer failed or ended before the announced Content-Length.
    """
    digest, size = hashlib.sha256(), 0
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            expected = response.headers.get("Content-Length")
            while block := response.read(chunk):
                digest.update(block)
                size += len(block)
    except Exception as e:  # urllib's HTTPError, URLError, IncompleteRead, timeouts
        raise ValueError(f"Could not read {url}: {type(e).__name__}: {e}") from None
    if expected is not None and int(expected) != size:
        raise ValueError(f"Could not read {url}: got {size} of {expected} bytes")
    return digest.hexdigest(), size


def pin(names=None, output=None, timeout=60):
    """Hashes the named checkpoints (default all) and merges their digests and sizes into `output`.

    `output` defaults to the registry's file, keras_vit/weights/sha256.json.
    Written to a temporary file and moved into place; entries already in
    the file are kept unless re-hashed (older entries that are a bare
    digest string stay readable); a re-hashed file whose digest differs
    from the recorded one is recorded anew with a warning on stderr.

    Returns:
        dict name -> {"sha256": hex digest, "size": bytes} of the files
        hashed in this call, as written.

    Raises:
        ValueError: an unknown name, or a file that could not be read (the
            output is left as it was).
    """
    from keras_vit.common.files import staged

    output = output or registry.PINNED_FILE
    names = list(names or registry.CHECKPOINTS)
    unknown = [n for n in names if n not in registry.CHECKPOINTS]
    if unknown:
        raise ValueError(f"Unknown checkpoint names: {', '.join(unknown)}")
    digests = {}
    for name in names:
        digest, size = digest_url(registry.CHECKPOINTS[name].url, timeout)
        digests[name] = {"sha256": digest, "size": size}
        print(f"{digest}  {size:>13,d}  {name}", flush=True)
    with open(output) as f:
        merged = json.load(f)
    for name, entry in digests.items():
        recorded = registry.pinned_entry(name, merged[name], output)[0] if name in merged else None
        if recorded not in (None, entry["sha256"]):
            print(f"pin: warning: {name}: the file now has SHA-256 {entry['sha256']}, the one recorded was "
                  f"{recorded}; recording the new one", file=sys.stderr)
    merged.update(digests)
    with staged(output, overwrite=True) as tmp:
        with open(tmp, "w") as f:
            json.dump(dict(sorted(merged.items())), f, indent=1)
            f.write("\n")
    return digests


def main(argv=None):
    """CLI; exit 0 when every file was hashed, 2 otherwise."""
    parser = argparse.ArgumentParser(prog="python -m keras_vit.weights.pin", description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", help="checkpoint names (default: all)")
    parser.add_argument("--output", help="JSON file (default: keras_vit/weights/sha256.json)")
    args = parser.parse_args(argv)
    try:
        pin(args.only, args.output)
    except ValueError as e:
        print(f"pin: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
