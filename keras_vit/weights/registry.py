"""The published ViT checkpoints: where they are, what they hold, and a checked download.

URLs from google-research/vision_transformer (README and `vit_jax.ipynb`
gsutil listing) and the AugReg names timm's `default_cfgs` point at
(CHECKPOINTS.md). "imagenet" means ImageNet-21k pre-training then
ImageNet-1k fine-tuning (1000-class head); "imagenet21k" means pre-training
only (21843-class head, or an all-zero head where the file has one).
"""

import dataclasses
import hashlib
import json
import logging
import os

import keras

ORIGINAL = "https://storage.googleapis.com/vit_models/imagenet21k"
ORIGINAL_FT = "https://storage.googleapis.com/vit_models/imagenet21k%2Bimagenet2012"
AUGREG = "https://storage.googleapis.com/vit_models/augreg"
CACHE_SUBDIR = os.path.join("models", "keras_vit")
# name -> {"sha256": hex digest, "size": bytes} of the published file (a bare digest string is read too; "size"
# may be missing), written by `python -m keras_vit.weights.pin` on a machine that can reach
# storage.googleapis.com, or copied from public sources (docs/sha256_sources.md says which). Names missing here
# download with a logged digest instead of a check.
PINNED_FILE = os.path.join(os.path.dirname(__file__), "sha256.json")
_HEX = frozenset("0123456789abcdef")


def pinned_entry(name, value, source=PINNED_FILE):
    """Returns (sha256, size or None) of one entry of the pinned-digest file.

    Args:
        name: the registry name the entry is filed under.
        value: a 64-character lowercase hex digest, or a dict
            {"sha256": digest, "size": bytes (int >= 1, optional)}.
        source: the file, named in errors.

    Raises:
        ValueError: a malformed entry (file, name and value in the message).
    """
    digest, size = (value, None) if isinstance(value, str) else (None, None)
    if isinstance(value, dict) and set(value) <= {"sha256", "size"}:
        digest, size = value.get("sha256"), value.get("size")
    if not (isinstance(digest, str) and len(digest) == 64 and set(digest) <= _HEX) or not (
        size is None or (isinstance(size, int) and not isinstance(size, bool) and size >= 1)
    ):
        raise ValueError(
            f"{source}: entry {name!r} must be a 64-character lowercase hex SHA-256 or "
            f'{{"sha256": ..., "size": bytes}}. Received: {value!r}'
        )
    return digest, size


def _pinned():
    with open(PINNED_FILE) as f:
        return {name: pinned_entry(name, value) for name, value in json.load(f).items()}

_AUGREG_PRETRAIN = {
    "Ti_16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "S_16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "S_32": "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "B_8": "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "B_16": "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "B_32": "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0",
    "L_16": "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
}
# The ImageNet-1k fine-tune learning rate of the 224 px file timm uses for each.
_AUGREG_FT_LR = {"Ti_16": "0.03", "S_16": "0.03", "S_32": "0.03", "B_8": "0.01", "B_16": "0.01", "B_32": "0.03",
                 "L_16": "0.01"}
_VARIANT_OF = {"Ti_16": "ViTTi16", "S_16": "ViTS16", "S_32": "ViTS32", "B_8": "ViTB8", "B_16": "ViTB16",
               "B_32": "ViTB32", "L_16": "ViTL16", "L_32": "ViTL32", "H_14": "ViTH14"}


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One published checkpoint file.

    Attributes:
        name: registry key, e.g. "augreg/B_16-i21k+i1k-224".
        variant: the keras_vit builder it fits, e.g. "ViTB16".
        url: official download URL.
        sha256: pinned SHA-256 hex digest of the file, or None where it has
            not been recorded yet (see `fetch`).
        image_size: resolution (pixels, square) the file was trained at.
        classes: classes of its head (1000, 21843).
        representation_size: width of its `pre_logits` layer, or None.
        zero_head: True where the head is known to be all zeros (a
            pre-training file whose classifier was dropped).
        size: the file's length in bytes where it is recorded, else None;
            `fetch` checks it before hashing, so a truncated file fails at once.
    """

    name: str
    variant: str
    url: str
    sha256: object
    image_size: int
    classes: int
    representation_size: object = None
    zero_head: bool = False
    size: object = None


def _registry():
    pinned = _pinned()
    entries = []
    for short, stem in _AUGREG_PRETRAIN.items():
        variant = _VARIANT_OF[short]
        entries.append(Checkpoint(f"augreg/{short}-i21k", variant, f"{AUGREG}/{stem}.npz", None, 224, 21843))
        for res in (224, 384):
            ft = f"{stem}--imagenet2012-steps_20k-lr_{_AUGREG_FT_LR[short]}-res_{res}"
            if res == 384 and short == "B_8":
                continue  # no 384 px B/8 fine-tune is published
            if res == 384 and short == "B_32":  # timm's 384 px B/32 comes from another pre-training run
                ft = "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_384"
            entries.append(Checkpoint(f"augreg/{short}-i21k+i1k-{res}", variant, f"{AUGREG}/{ft}.npz", None, res, 1000))
    widths = {"B": 768, "L": 1024, "H": 1280}
    for short in ("B_16", "B_32", "B_8", "L_16", "L_32", "H_14"):
        variant, width = _VARIANT_OF[short], widths[short[0]]
        entries.append(Checkpoint(
            f"original/{short}-i21k", variant, f"{ORIGINAL}/ViT-{short}.npz", None, 224, 21843,
            representation_size=width, zero_head=short in ("L_32", "H_14"),
        ))
        if short != "H_14":
            entries.append(Checkpoint(f"original/{short}-i21k+i1k-384", variant, f"{ORIGINAL_FT}/ViT-{short}.npz",
                                      None, 384, 1000))
        if short in ("B_16", "L_16"):
            entries.append(Checkpoint(f"original/{short}-i21k+i1k-224", variant, f"{ORIGINAL_FT}/ViT-{short}-224.npz",
                                      None, 224, 1000))
    # Hybrids (paper Sec. 3.1): the original R50+B/16, and the AugReg files of the GR README's table.
    entries += [
        Checkpoint("original/R50+B_16-i21k", "ViTR50B16", f"{ORIGINAL}/R50%2BViT-B_16.npz", None, 224, 21843,
                   representation_size=768),
        Checkpoint("original/R50+B_16-i21k+i1k-384", "ViTR50B16", f"{ORIGINAL_FT}/R50%2BViT-B_16.npz", None, 384, 1000),
    ]
    hybrids = {
        "R26_S_32": ("ViTR26S32", "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0"),
        "R50_L_32": ("ViTR50L32", "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"),
    }
    for short, (variant, stem) in hybrids.items():
        entries.append(Checkpoint(f"augreg/{short}-i21k", variant, f"{AUGREG}/{stem}.npz", None, 224, 21843))
        ft = f"{stem}--imagenet2012-steps_20k-lr_0.01-res_384"
        entries.append(Checkpoint(f"augreg/{short}-i21k+i1k-384", variant, f"{AUGREG}/{ft}.npz", None, 384, 1000))
    # timm's 224 px R26+S/32 comes from another pre-training run
    ft = "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.03-res_224"
    entries.append(Checkpoint("augreg/R26_S_32-i21k+i1k-224", "ViTR26S32", f"{AUGREG}/{ft}.npz", None, 224, 1000))
    return {c.name: dataclasses.replace(c, sha256=pinned.get(c.name, (None, None))[0],
                                        size=pinned.get(c.name, (None, None))[1]) for c in entries}


CHECKPOINTS = _registry()

# What `weights="imagenet"` / `"imagenet21k"` mean for each builder.
DEFAULTS = {
    "imagenet": {
        **{_VARIANT_OF[s]: f"augreg/{s}-i21k+i1k-224" for s in _AUGREG_PRETRAIN},
        "ViTL32": "original/L_32-i21k+i1k-384",
        "ViTR26S32": "augreg/R26_S_32-i21k+i1k-224",
        "ViTR50B16": "original/R50+B_16-i21k+i1k-384",
        "ViTR50L32": "augreg/R50_L_32-i21k+i1k-384",
    },
    "imagenet21k": {
        **{_VARIANT_OF[s]: f"augreg/{s}-i21k" for s in _AUGREG_PRETRAIN},
        "ViTL32": "original/L_32-i21k",
        "ViTH14": "original/H_14-i21k",
        "ViTR26S32": "augreg/R26_S_32-i21k",
        "ViTR50B16": "original/R50+B_16-i21k",
        "ViTR50L32": "augreg/R50_L_32-i21k",
    },
}


def resolve(weights, variant):
    """Returns the `Checkpoint` that `weights` names for a model of `variant`.

    Args:
        weights: "imagenet", "imagenet21k" or a key of `CHECKPOINTS`.
        variant: builder name ("ViTB16") or None for a configuration that
            matches no variant.

    Raises:
        ValueError: an unknown name, a variant without such a checkpoint, or
            a checkpoint of another variant (all named in the message).
    """
    if weights in DEFAULTS:
        if variant is None:
            raise ValueError(
                f"weights={weights!r} needs one of the variant configurations ({', '.join(DEFAULTS[weights])}); "
                "this model matches none of them"
            )
        if variant not in DEFAULTS[weights]:
            raise ValueError(
                f"No {weights!r} checkpoint is published for {variant}. Received: weights={weights!r}. "
                f"Variants with one: {', '.join(sorted(DEFAULTS[weights]))}"
            )
        return CHECKPOINTS[DEFAULTS[weights][variant]]
    if weights not in CHECKPOINTS:
        raise ValueError(f"Unknown checkpoint name. Received: weights={weights!r}")
    checkpoint = CHECKPOINTS[weights]
    if checkpoint.variant != variant:
        raise ValueError(
            f"Checkpoint {weights!r} is a {checkpoint.variant} checkpoint; the model is "
            f"{variant or 'not a published variant (or not 3-channel)'}"
        )
    return checkpoint


def sha256(path, chunk=1 << 20):
    """Returns the SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_path(checkpoint, cache_dir=None):
    """The path `fetch` keeps `checkpoint`'s file at, where a copy put by hand is used without a download.

    `keras.utils.get_file`'s rule: `cache_dir` (default `$KERAS_HOME`, else
    `~/.keras`, else `/tmp/.keras` where that is not writable), then
    `models/keras_vit/`, then the registry name with "/" as "--" plus
    ".npz", e.g. `~/.keras/models/keras_vit/augreg--Ti_16-i21k.npz`.
    """
    if cache_dir is None:
        try:
            from keras.src.backend.config import keras_home  # what get_file reads; not public API
        except ImportError:  # another Keras layout: its documented default
            base = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
        else:
            base = keras_home()
    else:
        base = cache_dir
    base = os.path.expanduser(base)
    if not os.access(base, os.W_OK):  # get_file falls back so too
        base = os.path.join("/tmp", ".keras")
    return os.path.join(base, CACHE_SUBDIR, _cache_name(checkpoint))


def _cache_name(checkpoint):
    return f"{checkpoint.name.replace('/', '--')}.npz"


def fetch(checkpoint, cache_dir=None):
    """Downloads a checkpoint with `keras.utils.get_file` (cached) and checks its size and SHA-256.

    Files go to `~/.keras/models/keras_vit/` (or `cache_dir/models/
    keras_vit/`); `keras.utils.get_file` removes a partial download when
    the transfer fails (a connection cut short raises
    `urllib.error.ContentTooShortError`). The file is checked here, the
    cached copy too: first its length against the pinned size (where one
    is recorded: a truncated file fails without being read), then its
    SHA-256 against the pinned digest. A file that fails either check is
    deleted and fetched once more; if that copy fails too it is deleted and
    an error raised, so nothing corrupt is ever loaded. Where no digest is
    pinned (`checkpoint.sha256` is None) the file is used and its digest is
    logged, to be recorded in the registry.

    Args:
        checkpoint: a `Checkpoint`.
        cache_dir: optional cache root, default `~/.keras`.

    Returns:
        The local path of the verified file.

    Raises:
        ValueError: the file's size or SHA-256 differs from the pinned one
            (the file has been deleted), or the download failed (the
            message names the URL and the cause).
    """
    fname = _cache_name(checkpoint)
    for _ in (1, 2):  # a stale or damaged cached copy is fetched again once
        try:
            path = keras.utils.get_file(fname, checkpoint.url, cache_dir=cache_dir, cache_subdir=CACHE_SUBDIR)
        except Exception as e:  # get_file wraps HTTP and URL errors in a bare Exception
            raise ValueError(
                f"Download of checkpoint {checkpoint.name!r} from {checkpoint.url} failed: {type(e).__name__}: {e}"
            ) from None
        size = os.path.getsize(path)
        if checkpoint.size is not None and size != checkpoint.size:
            problem = f"it has {size:,d} bytes, expected {checkpoint.size:,d}"
            os.remove(path)
            continue
        digest = sha256(path)
        if checkpoint.sha256 is None:
            logging.getLogger("keras_vit.weights").warning("No SHA-256 is pinned for %s; the file %s (%d bytes) has SHA-256 %s", checkpoint.name, path,
                        size, digest)
            return path
        if digest == checkpoint.sha256:
            return path
        problem = f"its SHA-256 is {digest}, expected {checkpoint.sha256}"
        os.remove(path)
    raise ValueError(
        f"Checkpoint {checkpoint.name!r} from {checkpoint.url} is corrupt or truncated: {problem}. "
        "The file has been deleted."
    )
