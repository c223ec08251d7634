"""Checked downloads (keras.utils.get_file + SHA-256) against a local HTTP server on 127.0.0.1."""

import hashlib
import json
import http.server
import threading

import numpy as np
import pytest

import keras_vit
from keras_vit.weights import registry
from tests.weights import reference


class _Server:
    """Serves `files` (path -> bytes); paths under /truncated/ announce the full length but send half."""

    def __init__(self, files):
        self.files = files
        self.requests = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                server.requests.append(self.path)
                body = server.files.get(self.path)
                if body is None:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2] if self.path.startswith("/truncated/") else body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # a free port, chosen now
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def tiny_npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("srv") / "tiny.npz"
    np.savez(path, **reference.google_checkpoint(0))
    return path.read_bytes()


def _entry(url, digest, name="test/tiny", size=None):
    return registry.Checkpoint(name, "ViTTi16", url, digest, 16, 5, size=size)


@pytest.fixture
def hashed(monkeypatch):
    """Records the files `fetch` hashes (it reads them through `registry.sha256`)."""
    calls, real = [], registry.sha256
    monkeypatch.setattr(registry, "sha256", lambda path: calls.append(path) or real(path))
    return calls


def test_fetch_downloads_checks_and_caches(tmp_path, tiny_npz):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/tiny.npz": tiny_npz}) as server:
        entry = _entry(f"{server.url}/tiny.npz", digest)
        path = registry.fetch(entry, cache_dir=str(tmp_path))
        assert open(path, "rb").read() == tiny_npz
        assert registry.fetch(entry, cache_dir=str(tmp_path)) == path
        assert server.requests == ["/tiny.npz"]  # the second call used the cache


@pytest.mark.parametrize("pinned_size", [False, True], ids=["digest_only", "right_size"])
def test_corrupt_download_is_deleted_and_raises(tmp_path, tiny_npz, hashed, pinned_size):
    corrupt = bytearray(tiny_npz)
    corrupt[len(corrupt) // 2] ^= 0xFF
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/tiny.npz": bytes(corrupt)}) as server:
        entry = _entry(f"{server.url}/tiny.npz", digest, size=len(tiny_npz) if pinned_size else None)
        with pytest.raises(ValueError, match=f"is corrupt or truncated: its SHA-256 is [0-9a-f]{{64}}, expected {digest}"):
            registry.fetch(entry, cache_dir=str(tmp_path))
        assert len(server.requests) == 2  # fetched again once before giving up
    assert len(hashed) == 2  # the size fitted: both copies were hashed
    assert not list(tmp_path.rglob("*.npz"))


def test_file_of_the_wrong_size_fails_before_hashing(tmp_path, tiny_npz, hashed):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    half = tiny_npz[: len(tiny_npz) // 2]  # served whole with its own Content-Length: the transfer succeeds
    with _Server({"/tiny.npz": half}) as server:
        entry = _entry(f"{server.url}/tiny.npz", digest, size=len(tiny_npz))
        with pytest.raises(ValueError, match=rf"'test/tiny' from .* is corrupt or truncated: it has {len(half):,d} "
                                             rf"bytes, expected {len(tiny_npz):,d}. The file has been deleted."):
            registry.fetch(entry, cache_dir=str(tmp_path))
        assert len(server.requests) == 2
    assert hashed == []
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_pinned_good_file_passes_size_and_digest_checks_cached_too(tmp_path, tiny_npz, hashed, caplog):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/tiny.npz": tiny_npz}) as server:
        entry = _entry(f"{server.url}/tiny.npz", digest, size=len(tiny_npz))
        with caplog.at_level("WARNING", logger="keras_vit.weights"):
            path = registry.fetch(entry, cache_dir=str(tmp_path))
            assert registry.fetch(entry, cache_dir=str(tmp_path)) == path
        assert server.requests == ["/tiny.npz"]
    assert open(path, "rb").read() == tiny_npz and hashed == [path, path] and not caplog.records


def test_truncated_transfer_leaves_nothing(tmp_path, tiny_npz):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/truncated/tiny.npz": tiny_npz}) as server:
        entry = _entry(f"{server.url}/truncated/tiny.npz", digest)
        with pytest.raises(ValueError, match="Download of checkpoint 'test/tiny' from .* failed"):
            registry.fetch(entry, cache_dir=str(tmp_path))
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


def test_truncated_file_with_matching_length_fails_the_hash(tmp_path, tiny_npz):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/tiny.npz": tiny_npz[: len(tiny_npz) // 2]}) as server:
        with pytest.raises(ValueError, match="corrupt or truncated"):
            registry.fetch(_entry(f"{server.url}/tiny.npz", digest), cache_dir=str(tmp_path))
    assert not list(tmp_path.rglob("*.npz"))


def test_damaged_cached_copy_is_fetched_again(tmp_path, tiny_npz):
    digest = hashlib.sha256(tiny_npz).hexdigest()
    with _Server({"/tiny.npz": tiny_npz}) as server:
        entry = _entry(f"{server.url}/tiny.npz", digest)
        path = registry.fetch(entry, cache_dir=str(tmp_path))
        with open(path, "r+b") as f:
            f.write(b"garbage")
        assert registry.fetch(entry, cache_dir=str(tmp_path)) == path
        assert open(path, "rb").read() == tiny_npz and len(server.requests) == 2


def test_missing_url_raises_a_clear_error(tmp_path):
    with _Server({}) as server:
        with pytest.raises(ValueError, match=r"Download of checkpoint 'test/tiny' from http://127.0.0.1:\d+/nope.npz failed"):
            registry.fetch(_entry(f"{server.url}/nope.npz", None), cache_dir=str(tmp_path))


def test_unpinned_file_is_used_and_its_digest_logged(tmp_path, tiny_npz, caplog):
    with _Server({"/tiny.npz": tiny_npz}) as server:
        with caplog.at_level("WARNING", logger="keras_vit.weights"):
            registry.fetch(_entry(f"{server.url}/tiny.npz", None), cache_dir=str(tmp_path))
    digest = hashlib.sha256(tiny_npz).hexdigest()
    assert f"No SHA-256 is pinned for test/tiny; the file" in caplog.text and digest in caplog.text


def test_registry_is_complete_and_well_formed():
    names = registry.CHECKPOINTS
    for short in ("B_16", "B_32", "B_8", "L_16", "L_32", "H_14"):
        assert f"original/{short}-i21k" in names
    for short in ("B_16", "B_32", "B_8", "L_16", "L_32"):
        assert f"original/{short}-i21k+i1k-384" in names
    for short in ("Ti_16", "S_16", "S_32", "B_16", "B_32", "L_16"):
        assert f"augreg/{short}-i21k" in names and f"augreg/{short}-i21k+i1k-224" in names
    for c in names.values():
        assert c.url.startswith("https://storage.googleapis.com/vit_models/") and c.url.endswith(".npz")
        assert c.sha256 is None or len(c.sha256) == 64
        assert c.size is None or (c.sha256 is not None and c.size > 0)
    assert names["original/B_16-i21k+i1k-224"].url.endswith("imagenet21k%2Bimagenet2012/ViT-B_16-224.npz")
    from keras_vit.models.variants import HYBRID_VARIANTS, VARIANTS

    assert set(registry.DEFAULTS["imagenet21k"]) == set(VARIANTS) | set(HYBRID_VARIANTS)
    assert set(registry.DEFAULTS["imagenet"]) == (set(VARIANTS) | set(HYBRID_VARIANTS)) - {"ViTH14"}
    assert names["original/R50+B_16-i21k"].url.endswith("/imagenet21k/R50%2BViT-B_16.npz")
    with pytest.raises(ValueError, match="No 'imagenet' checkpoint is published for ViTH14"):
        registry.resolve("imagenet", "ViTH14")


def test_builder_imagenet_downloads_verifies_and_matches_the_reference(tmp_path, monkeypatch):
    """ViTTi16(weights="imagenet") end to end, its official URL replaced by a local one."""
    arrays = reference.google_checkpoint(3, patch=16, width=192, layers=12, heads=3, mlp=768, grid=(14, 14),
                                         classes=1000)
    for k, v in arrays.items():  # small weights keep 12 random blocks numerically tame
        if k.endswith("kernel"):
            arrays[k] = v * 0.1
    path = tmp_path / "ti16.npz"
    np.savez(path, **arrays)
    body = path.read_bytes()
    name = registry.DEFAULTS["imagenet"]["ViTTi16"]
    with _Server({"/ti16.npz": body}) as server:
        entry = registry.Checkpoint(name, "ViTTi16", f"{server.url}/ti16.npz",
                                    hashlib.sha256(body).hexdigest(), 224, 1000)
        monkeypatch.setitem(registry.CHECKPOINTS, name, entry)
        real_fetch = registry.fetch
        monkeypatch.setattr(registry, "fetch", lambda checkpoint, cache_dir=None: real_fetch(checkpoint, str(tmp_path)))
        model = keras_vit.ViTTi16(weights="imagenet", classifier_activation=None)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 224, 224, 3)).astype("float32")
    np.testing.assert_allclose(model.predict(x, verbose=0), reference.forward(arrays, x, layers=12), atol=1e-4, rtol=0)
    assert len(server.requests) == 1 and list((tmp_path / "models" / "keras_vit").iterdir())


def test_pin_records_digests_that_fetch_then_enforces(tmp_path, tiny_npz, monkeypatch, capsys):
    from keras_vit.weights import pin

    output = tmp_path / "sha256.json"
    output.write_text('{"other/file": "' + "0" * 64 + '"}\n')
    with _Server({"/a.npz": tiny_npz, "/truncated/b.npz": tiny_npz}) as server:
        monkeypatch.setitem(registry.CHECKPOINTS, "test/a", _entry(f"{server.url}/a.npz", None, "test/a"))
        monkeypatch.setitem(registry.CHECKPOINTS, "test/b", _entry(f"{server.url}/truncated/b.npz", None, "test/b"))
        assert pin.main(["--only", "test/a", "--output", str(output)]) == 0
        assert pin.main(["--only", "test/b", "--output", str(output)]) == 2  # a short transfer pins nothing
        assert pin.main(["--only", "test/nope", "--output", str(output)]) == 2
        recorded = json.loads(output.read_text())
        good = {"sha256": hashlib.sha256(tiny_npz).hexdigest(), "size": len(tiny_npz)}
        assert recorded == {"other/file": "0" * 64, "test/a": good}
        output.write_text(json.dumps({"test/a": "f" * 64}))  # an older digest, as a bare string
        assert pin.main(["--only", "test/a", "--output", str(output)]) == 0
    assert json.loads(output.read_text()) == {"test/a": good}
    assert f"pin: warning: test/a: the file now has SHA-256 {good['sha256']}, the one recorded was " + "f" * 64 \
        in capsys.readouterr().err


def test_registry_reads_pinned_digests_and_sizes(tmp_path, monkeypatch):
    pinned = tmp_path / "sha256.json"
    pinned.write_text(json.dumps({"augreg/S_16-i21k": "a" * 64,  # the older form: a bare digest
                                  "augreg/S_32-i21k": {"sha256": "b" * 64, "size": 123}}))
    monkeypatch.setattr(registry, "PINNED_FILE", str(pinned))
    entries = registry._registry()
    assert (entries["augreg/S_16-i21k"].sha256, entries["augreg/S_16-i21k"].size) == ("a" * 64, None)
    assert (entries["augreg/S_32-i21k"].sha256, entries["augreg/S_32-i21k"].size) == ("b" * 64, 123)
    assert entries["augreg/B_16-i21k"].sha256 is None and entries["augreg/B_16-i21k"].size is None
    for bad in ("A" * 64, {"sha256": "b" * 64, "size": 0}, {"sha256": "b" * 63}, {"digest": "b" * 64}):
        pinned.write_text(json.dumps({"augreg/S_16-i21k": bad}))
        with pytest.raises(ValueError, match=f"sha256.json: entry 'augreg/S_16-i21k' must be a 64-character lowercase "
                                             f"hex SHA-256 .* Received: "):
            registry._registry()


def test_shipped_pins_name_registry_files_and_are_well_formed():
    with open(registry.PINNED_FILE) as f:
        shipped = json.load(f)
    assert set(shipped) <= set(registry.CHECKPOINTS)  # a mistyped name would pin nothing
    for name, value in shipped.items():
        digest, size = registry.pinned_entry(name, value)
        assert (registry.CHECKPOINTS[name].sha256, registry.CHECKPOINTS[name].size) == (digest, size)
    # the three published digests (docs/sha256_sources.md), filed under the names of their URLs
    assert {"augreg/S_16-i21k+i1k-224", "original/R50+B_16-i21k", "original/B_16-i21k+i1k-384"} <= set(shipped)
    assert registry.CHECKPOINTS["augreg/S_16-i21k+i1k-224"].url.endswith(
        "/augreg/S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz")
    assert registry.CHECKPOINTS["original/R50+B_16-i21k"].url.endswith("/imagenet21k/R50%2BViT-B_16.npz")
    assert registry.CHECKPOINTS["original/B_16-i21k+i1k-384"].url.endswith("/imagenet21k%2Bimagenet2012/ViT-B_16.npz")
