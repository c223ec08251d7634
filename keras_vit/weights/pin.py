"""Record the SHA-256 of every published checkpoint: `python -m keras_vit.weights.pin` (maintainers).

Streams each file of `keras_vit.weights.CHECKPOINTS` from its official URL
(nothing is kept on disk), hashes it, and writes the digests to
`keras_vit/weights/sha256.json`, which `fetch` then enforces. Needs a
machine that reaches storage.googleapis.com; the files total tens of GB.

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
    """Hashes the named checkpoints (default all) and merges the digests into `output` (default the registry's file).

    Written to a temporary file and moved into place; entries already in
    the file are kept unless re-hashed.

    Returns:
        dict name -> digest of the files hashed in this call.

    Raises:
        ValueError: an unknown name, or a file that could not be read (the
            output is left as it was).
    """
    from keras_vit._files import staged

    output = output or registry.PINNED_FILE
    names = list(names or registry.CHECKPOINTS)
    unknown = [n for n in names if n not in registry.CHECKPOINTS]
    if unknown:
        raise ValueError(f"Unknown checkpoint names: {', '.join(unknown)}")
    digests = {}
    for name in names:
        digests[name], size = digest_url(registry.CHECKPOINTS[name].url, timeout)
        print(f"{digests[name]}  {size:>13,d}  {name}", flush=True)
    with open(output) as f:
        merged = json.load(f)
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
