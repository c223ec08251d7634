"""tf.distribute training (issue 6): strategies, preemption and resume, MirroredStrategy and multi-worker on CPU."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_vit import distribute, train

TINY = ["--image-size", "16", "--patch-size", "4", "--hidden-size", "32", "--num-layers", "1", "--num-heads", "2",
        "--mlp-dim", "64", "--verbose", "0", "--seed", "0"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


def _train_command(out, *extra):
    return [sys.executable, "-m", "keras_vit.train", "--output-dir", str(out), *TINY, *extra]


def _train(out, *extra, timeout=600):
    return subprocess.run(_train_command(out, *extra), capture_output=True, text=True, timeout=timeout, env=ENV)


def _main(capsys, out, *extra):
    """The command of `_train_command` run in this process (`keras_vit.train.main`): (exit status, stdout, stderr).

    For what needs no process of its own (a refusal, a run on this process' one CPU device): the same flags, checks,
    files and messages (`python -m keras_vit.train` is `sys.exit(main())`), without a fresh TensorFlow import (some
    5 s each). The subprocesses of this module remain where the process itself is what is tested: a kill, a resume,
    logical CPU devices, several workers.
    """
    capsys.readouterr()  # what came before
    try:
        code = train.main(["--output-dir", str(out), *TINY, *extra])
    except SystemExit as e:  # a refusal: parser.exit(2, message)
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _weights(path):
    import keras

    import keras_vit  # noqa: F401 (registers the layers)

    return [w.numpy() for w in keras.saving.load_model(path).weights]


def test_get_strategy_and_its_errors(monkeypatch):
    import tensorflow as tf

    assert distribute.get_strategy("default") is tf.distribute.get_strategy()
    with pytest.raises(ValueError, match="`strategy` must be one of 'default', 'mirrored', 'multi_worker', 'tpu'"):
        distribute.get_strategy("horovod")
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="strategy='multi_worker' needs the TF_CONFIG environment variable"):
        distribute.get_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG must be JSON with 'cluster' and 'task'"):
        distribute.cluster_spec()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}))
    assert not distribute.is_chief()
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}))
    assert distribute.is_chief()
    with pytest.raises(ValueError, match="`devices` applies to strategy='mirrored' only"):
        distribute.get_strategy("default", devices=["/cpu:0"])


def test_tpu_strategy_without_a_tpu_is_a_clear_error(tmp_path, capsys):
    code, _, err = _main(capsys, tmp_path / "unused-tpu-run", "--strategy", "tpu", "--epochs", "1")
    assert code == 2, err[-2000:]
    assert "--strategy tpu: no TPU could be reached" in err  # issue 25: named by its flag
    code, _, err = _main(capsys, tmp_path / "unused-tpu-run", "--strategy", "tpu", "--tpu", "no-such-tpu",
                         "--epochs", "1")
    assert code == 2 and "--strategy tpu: no TPU could be reached" in err, err[-2000:]
    assert not (tmp_path / "unused-tpu-run").exists()


@pytest.mark.slow
def test_killed_run_resumes_to_the_weights_of_an_uninterrupted_run(tmp_path, capsys):
    # With the deit recipe: RandAugment, erasing, Mixup and CutMix are replayed, and stochastic depth draws the
    # masks of an uninterrupted run (its seed states are in the backup: keras_vit.cli.run_files.backup_callback).
    args = ["--epochs", "4", "--batch-size", "16", "--recipe", "deit"]
    # The uninterrupted run trains beside the one to be killed (the two are independent processes).
    whole_log = open(tmp_path / "whole.log", "w")
    whole = subprocess.Popen(_train_command(tmp_path / "whole", *args), stdout=subprocess.DEVNULL, stderr=whole_log,
                             env=ENV)
    out = tmp_path / "killed"
    proc = subprocess.Popen(_train_command(out, *args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    metadata = out / "backup" / "training_metadata.json"
    try:
        deadline = time.time() + 300
        while time.time() < deadline and proc.poll() is None:
            try:
                if json.loads(metadata.read_text())["epoch"] >= 2:
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        time.sleep(0.3)  # into epoch 3
        proc.send_signal(signal.SIGKILL)  # preemption: no clean-up at all
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "model.keras").exists()
    assert json.loads(metadata.read_text())["epoch"] in (2, 3)
    assert json.loads((out / "backup" / "run.json").read_text())["epochs"] == 4  # the flags the backup belongs to
    code, _, err = _main(capsys, out, *args, "--seed", "7")  # another command: refused (in this process), kept
    assert code == 2 and "holds the backup of an interrupted run of another command (--seed 0 then, " \
        "7 now): rerun that command to resume it" in err, err[-3000:]
    resumed = _train(out, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming the interrupted run backed up in {out / 'backup'}: " in resumed.stdout
    assert not (out / "backup").exists()  # removed once training ended
    history = json.loads((out / "history.json").read_text())
    assert len(history["loss"]) < 4  # only the epochs after the backup were run again
    whole.wait(timeout=600)
    whole_log.close()
    assert whole.returncode == 0, (tmp_path / "whole.log").read_text()[-3000:]
    for a, b in zip(_weights(tmp_path / "whole" / "model.keras"), _weights(out / "model.keras")):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


MIRRORED = r"""
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras, numpy as np
import keras_vit
from keras_vit import data, distribute, training
from keras_vit.distillation import Distiller
results, distil = {}, "--distil" in sys.argv
for name in [a for a in sys.argv[1:] if a != "--distil"]:  # each from the same seed, in one process of two CPUs
    keras.utils.set_random_seed(0)
    strategy = distribute.get_strategy(name, devices=["/cpu:0", "/cpu:1"] if name == "mirrored" else None)
    train = distribute.shard(data.digits("train", image_size=16, batch_size=64, shuffle=False))
    with strategy.scope():
        model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                            input_shape=(16, 16, 3), classes=10, classifier_activation=None,
                                            distillation_token=distil)
        trained = model
        if distil:  # DeiT's hard distillation: the frozen teacher runs inside each replica's step
            teacher = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Flatten(), keras.layers.Dense(10)],
                                       name="teacher")
            trained = Distiller(model, teacher)
        # XLA cannot compile a replica step whose variables sit on another logical CPU device (docs/traps.md).
        training.compile_model(trained, total_steps=3 * int(train.cardinality()), learning_rate=3e-3,
                               jit_compile=False, **({"from_logits": True} if distil else {}))
    history = trained.fit(train, epochs=3, verbose=0, shuffle=False)
    results[name] = {"loss": history.history["loss"], "replicas": strategy.num_replicas_in_sync,
                     "jit": bool(trained.jit_compile), "cpu_only": distribute.cpu_only(strategy),
                     "collectives": distribute.needs_cpu_collectives(strategy),
                     "auto": distribute.choose_xla("auto", strategy, "float32")[0]}
print("RESULT", json.dumps(results))
"""


def _result(stdout):
    return json.loads(next(line for line in stdout.splitlines() if line.startswith("RESULT "))[7:])


@pytest.mark.slow
def test_mirrored_over_two_cpus_follows_the_one_device_loss_curve():
    # Both runs in one process (one TensorFlow import, not two): the one-device run on the default strategy first,
    # then MirroredStrategy over the two logical CPUs, each seeded anew: the set-up each had in a process of its own.
    r = subprocess.run([sys.executable, "-c", MIRRORED, "default", "mirrored"], capture_output=True, text=True,
                       timeout=600, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = _result(r.stdout)
    assert sorted(runs) == ["default", "mirrored"]
    assert runs["default"]["replicas"] == 1 and runs["mirrored"]["replicas"] == 2
    assert runs["mirrored"]["cpu_only"] and runs["mirrored"]["collectives"] and not runs["mirrored"]["auto"]
    assert runs["default"]["cpu_only"] and not runs["default"]["collectives"] and runs["default"]["auto"]
    assert runs["default"]["loss"][-1] < runs["default"]["loss"][0]  # it learns
    np.testing.assert_allclose(runs["mirrored"]["loss"], runs["default"]["loss"], rtol=2e-3)


@pytest.mark.slow
def test_distillation_under_mirrored_over_two_cpus_follows_the_one_device_loss_curve():
    """Issue 46: `Distiller` under MirroredStrategy (the teacher inside each replica's step; apart from it only on one
    device with XLA) gives the one-device run's losses, as the plain ViT does above."""
    r = subprocess.run([sys.executable, "-c", MIRRORED, "default", "mirrored", "--distil"], capture_output=True,
                       text=True, timeout=600, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = _result(r.stdout)
    assert runs["mirrored"]["replicas"] == 2 and not runs["mirrored"]["jit"]
    assert runs["default"]["loss"][-1] < runs["default"]["loss"][0]  # it learns
    np.testing.assert_allclose(runs["mirrored"]["loss"], runs["default"]["loss"], rtol=2e-3)


WORKER = r"""
import json, sys
import keras, numpy as np
import keras_vit
from keras_vit import data, distribute, training
prefix, name = sys.argv[1], sys.argv[2]  # "multi_worker" (from TF_CONFIG) or "default" (one process, no distribution)
strategy = distribute.get_strategy(name)
x = np.random.default_rng(0).uniform(0, 255, (64, 16, 16, 3)).astype("float32")
y = np.arange(64) % 4
train = distribute.shard(data.from_arrays(x, y, batch_size=16, image_size=16))  # global batch 16, 4 steps an epoch
result = {"replicas": strategy.num_replicas_in_sync, "chief": distribute.is_chief()}
# SGD: updates linear in the gradient, so a wrong scale shows; AdamW: the default recipe (decoupled weight decay).
for optimizer, learning_rate, weight_decay in (("sgd", 0.1, 0.0), ("adamw", 3e-3, 0.05)):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras_vit.VisionTransformer(patch_size=4, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                                            input_shape=(16, 16, 3), classes=4, classifier_activation=None)
        # XLA cannot compile cross-worker collectives for CPU devices (docs/traps.md).
        training.compile_model(model, total_steps=8, optimizer=optimizer, learning_rate=learning_rate,
                               weight_decay=weight_decay, jit_compile=False)
    np.savez(f"{prefix}_{optimizer}_init.npz", *[w.numpy() for w in model.weights])
    distribute.prepare_fit(model, train, strategy)
    model.fit(train, epochs=2, verbose=0, shuffle=False)
    np.savez(f"{prefix}_{optimizer}.npz", *[w.numpy() for w in model.weights])
    result[optimizer] = int(model.optimizer.iterations.numpy())
print("RESULT", json.dumps(result))
"""


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run_workers(command, count=2, timeout=600):
    """Runs `command(i)` as worker i of a cluster on 127.0.0.1 (free ports); returns [(stdout, stderr)].

    Bounded in time; every process is killed and reaped whatever happens; asserts each exited with 0.
    """
    workers = [f"127.0.0.1:{p}" for p in _free_ports(count)]
    procs = []
    try:
        for i in range(count):
            config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
            procs.append(subprocess.Popen(command(i), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                          env={**ENV, "TF_CONFIG": json.dumps(config)}))
        outputs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, (_, stderr) in zip(procs, outputs):
        assert p.returncode == 0, stderr[-3000:]
    return outputs


def _max_diff(a, b):
    assert a.files == b.files and len(a.files) > 0
    return max(float(np.abs(a[k] - b[k]).max()) for k in a.files)


@pytest.mark.slow
def test_multi_worker_on_two_local_processes_ends_with_identical_weights(tmp_path, capsys, monkeypatch):
    """Two workers on 127.0.0.1 end with the weights of one process that trains on the same global batches.

    Same data, seed, global batch (16: 8 per worker) and steps (8), with SGD and with AdamW. Measured here: the
    two-worker weights within 9e-8 (SGD) and 7.6e-7 (AdamW) of the one-process run, which moved its weights by
    0.15 and 0.013. Demonstrated once by hand (issue 17), each fault patched into the workers only: with
    `distribute.shard` set to `AutoShardPolicy.OFF` (every worker reads every example) the SGD weights ended
    0.22 from the one-process run (AdamW 0.017); with `_all_reduce_sum_gradients` returning each worker's own
    gradients the workers ended 0.21 apart; with the all-reduced gradients doubled (a wrong loss scale) 0.020
    away, after clipping. Each is over 2000 times the tolerance.
    """
    # The one-process run is WORKER itself, run in this process (no TF_CONFIG, the default strategy): one
    # TensorFlow import fewer; its initial weights are checked below to be the workers' own.
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setattr(sys, "argv", ["-c", str(tmp_path / "one"), "default"])
    capsys.readouterr()
    exec(compile(WORKER, "<WORKER>", "exec"), {"__name__": "__main__"})
    one_stdout = capsys.readouterr().out
    outputs = _run_workers(lambda i: [sys.executable, "-c", WORKER, str(tmp_path / f"w{i}"), "multi_worker"])
    results = [_result(stdout) for stdout, _ in outputs]
    assert [r["replicas"] for r in results] == [2, 2] and [r["chief"] for r in results] == [True, False]
    assert _result(one_stdout) == {"replicas": 1, "chief": True, "sgd": 8, "adamw": 8}
    assert [(r["sgd"], r["adamw"]) for r in results] == [(8, 8), (8, 8)]  # the same number of steps
    for optimizer in ("sgd", "adamw"):
        a, b, alone, start, start_w0 = (np.load(tmp_path / f"{name}.npz") for name in (
            f"w0_{optimizer}", f"w1_{optimizer}", f"one_{optimizer}", f"one_{optimizer}_init", f"w0_{optimizer}_init"))
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k])
        assert _max_diff(start_w0, start) == 0  # the same initial weights
        assert _max_diff(alone, start) > 0.01  # training moved them, far beyond the tolerance
        assert _max_diff(a, alone) <= 1e-5, optimizer


@pytest.mark.slow
def test_cli_multi_worker_chief_writes_the_model_and_the_other_worker_nothing(tmp_path):
    outputs = _run_workers(lambda i: [
        sys.executable, "-m", "keras_vit.train", "--output-dir", str(tmp_path / f"out{i}"), *TINY,
        "--epochs", "2", "--batch-size", "64", "--strategy", "multi_worker"])
    for _, stderr in outputs:
        assert "training without XLA" in stderr
    metrics = json.loads((tmp_path / "out0" / "metrics.json").read_text())
    assert metrics["strategy"] == "multi_worker" and metrics["replicas"] == 2 and metrics["jit_compile"] is False
    assert (tmp_path / "out0" / "model.keras").exists()
    assert not [p for p in (tmp_path / "out1").rglob("*") if p.is_file()]  # the other worker wrote nothing


def test_cli_mirrored_without_gpus_runs_on_one_cpu_replica_with_xla(tmp_path, capsys):
    code, _, err = _main(capsys, tmp_path, "--strategy", "mirrored", "--epochs", "1", "--batch-size", "64")
    assert code == 0, err[-3000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["strategy"] == "mirrored" and metrics["replicas"] == 1 and metrics["jit_compile"] is True
    assert not (tmp_path / "backup").exists()


def test_backup_dir_that_holds_other_files_is_refused(tmp_path, capsys):
    keep = tmp_path / "mydata"
    keep.mkdir()
    (keep / "notes.txt").write_text("precious")
    code, _, err = _main(capsys, tmp_path / "out", "--backup-dir", str(keep), "--epochs", "1")
    assert code == 2 and "holds other files (notes.txt)" in err, err[-2000:]
    code, _, err = _main(capsys, tmp_path / "out", "--backup-dir", str(tmp_path / "out"), "--epochs", "1")
    assert code == 2 and "must not be or contain --output-dir" in err, err[-2000:]
    code, _, err = _main(capsys, tmp_path / "out", "--tpu", "x", "--epochs", "1")
    assert code == 2 and "--tpu applies to --strategy tpu only" in err, err[-2000:]
    assert (keep / "notes.txt").read_text() == "precious"
    with pytest.raises(TypeError, match="`dataset` must be a tf.data.Dataset. Received: list"):
        distribute.shard([1, 2, 3])


def test_choose_xla_auto_turns_xla_off_only_where_it_is_slower_or_cannot_compile():
    import tensorflow as tf

    strategy = tf.distribute.get_strategy()  # one CPU here
    assert distribute.cpu_only(strategy) is True
    assert distribute.choose_xla("auto", strategy, "float32") == (True, None)
    assert distribute.choose_xla("auto", strategy, "mixed_float16") == (True, None)
    jit, why = distribute.choose_xla("auto", strategy, "mixed_bfloat16")
    assert jit is False and "mixed_bfloat16 on CPU" in why and "--xla on" in why
    assert distribute.choose_xla("on", strategy, "mixed_bfloat16") == (True, None)
    assert distribute.choose_xla("off", strategy, "float32") == (False, None)
    with pytest.raises(ValueError, match=r"`xla` must be 'auto', 'on' or 'off'. Received: xla=True"):
        distribute.choose_xla(True, strategy, "float32")


def test_cli_mixed_bfloat16_on_cpu_trains_without_xla_unless_forced(tmp_path, capsys):
    code, _, err = _main(capsys, tmp_path / "auto", "--precision", "mixed_bfloat16", "--epochs", "1")
    assert code == 0, err[-3000:]
    assert "mixed_bfloat16 on CPU: training without XLA" in err
    assert json.loads((tmp_path / "auto" / "metrics.json").read_text())["jit_compile"] is False
    code, _, err = _main(capsys, tmp_path / "on", "--precision", "mixed_bfloat16", "--epochs", "1", "--xla", "on")
    assert code == 0, err[-3000:]
    assert "training without XLA" not in err
    assert json.loads((tmp_path / "on" / "metrics.json").read_text())["jit_compile"] is True
