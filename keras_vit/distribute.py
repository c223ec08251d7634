"""Training on several devices and hosts with TensorFlow's own engine, `tf.distribute`.

keras_vit adds no distribution code of its own: it picks a `tf.distribute`
strategy, and Keras' `model.fit` does the rest (per-replica steps, gradient
all-reduce, dataset distribution). The batch size given to the data
pipeline is the *global* batch; each replica gets an equal share.

    strategy = keras_vit.distribute.get_strategy("mirrored")
    with strategy.scope():                 # model, optimizer and metrics are created here
        model = keras_vit.ViTB16(classes=10)
        keras_vit.training.compile_model(model, total_steps=...)
    keras_vit.distribute.prepare_fit(model, train, strategy)   # only does something for multi_worker
    model.fit(keras_vit.distribute.shard(train), ...)

See docs/scaling.md for the commands on several GPUs, several hosts and TPUs.
"""

import json
import os

from keras_vit.common.backend import backend, tensorflow

STRATEGIES = ("default", "mirrored", "multi_worker", "tpu")


def get_strategy(name="default", devices=None, tpu=None):
    """Returns the `tf.distribute.Strategy` called `name`.

    Args:
        name: "default" (one device, no distribution), "mirrored"
            (`MirroredStrategy`: synchronous data parallelism over all local
            GPUs, or over `devices`), "multi_worker"
            (`MultiWorkerMirroredStrategy`: the cluster and this process'
            role come from the `TF_CONFIG` environment variable), or "tpu"
            (`TPUStrategy` on the TPU named by `tpu`, default the local one or
            the `TPU_NAME` environment variable).
        devices: optional list of device names for "mirrored", e.g.
            ["/gpu:0", "/gpu:1"], or logical CPU devices ["/cpu:0", "/cpu:1"]
            (for tests; XLA cannot compile across logical CPU devices, so
            compile with `jit_compile=False` there).
        tpu: optional TPU name or address for "tpu".

    Returns:
        A `tf.distribute.Strategy`.

    Raises:
        ValueError: an unknown `name`; "multi_worker" without a valid
            `TF_CONFIG`; "tpu" where no TPU can be reached (the message says
            which); `devices` with another strategy.
    """
    tf = tensorflow("tf.distribute strategies (keras_vit.distribute, keras-vit-train --strategy)")

    from keras_vit.common.validation import check_choice

    check_choice("strategy", name, STRATEGIES)
    if devices is not None and name != "mirrored":
        raise ValueError(f"`devices` applies to strategy='mirrored' only. Received: strategy={name!r}")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(devices=devices)
    if name == "multi_worker":
        cluster = cluster_spec()
        if cluster is None:
            raise ValueError(
                "strategy='multi_worker' needs the TF_CONFIG environment variable, e.g. "
                '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}}'
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, OSError, tf.errors.OpError) as e:  # OSError: an unknown TPU name or address
        raise ValueError(f"strategy='tpu': no TPU could be reached ({type(e).__name__}: {str(e)[:200]})") from None
    return tf.distribute.TPUStrategy(resolver)


def needs_cpu_collectives(strategy):
    """True when `strategy` all-reduces across CPU devices, which XLA cannot compile ("Collectives are not yet
    implemented for CPU devices when compiling with XLA"): several replicas, or several workers, on CPUs."""
    tf = tensorflow("tf.distribute strategies (keras_vit.distribute, keras-vit-train --strategy)")

    several = strategy.num_replicas_in_sync > 1 or isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    return several and cpu_only(strategy)


def cpu_only(strategy):
    """True when every device `strategy` (a `tf.distribute.Strategy`) computes on is a CPU: no GPU, no TPU."""
    tf = tensorflow("tf.distribute strategies (keras_vit.distribute, keras-vit-train --strategy)")

    if isinstance(strategy, tf.distribute.TPUStrategy):
        return False
    if strategy.num_replicas_in_sync > 1 or isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return all("CPU" in d.upper() for d in strategy.extended.worker_devices)
    return not tf.config.list_logical_devices("GPU")  # the default strategy runs on the first GPU if any


def choose_xla(xla, strategy, precision):
    """Decides whether to compile the train step with XLA, for `keras-vit-train --xla`.

    Args:
        xla: "auto", "on" or "off".
        strategy: the `tf.distribute.Strategy` training runs under.
        precision: the Keras dtype policy name ("float32", "mixed_bfloat16", "mixed_float16").

    Returns:
        (jit_compile, reason): a bool, and a sentence saying why XLA is off when "auto" turned it off (else None).
        "auto" is on except (0) on the PyTorch backend (Keras' jit_compile is torch.compile there), (1) when TensorFlow's op determinism is on (`TF_DETERMINISTIC_OPS=1` or
        `tf.config.experimental.enable_op_determinism()`), under which Keras 3.15 never compiles with XLA,
        (2) when the strategy all-reduces across CPU devices, which XLA cannot compile, and
        (3) for mixed_bfloat16 on CPUs only: XLA:CPU's bfloat16 matrix products use no bfloat16 hardware (AMX,
        AVX512-BF16) while TensorFlow's oneDNN kernels do, so ViT-B/16 trains 1.7-1.9x faster without XLA on
        such a CPU (benchmarks/findings/full-run-2026-11-30-intel-amx.md).

    Raises:
        ValueError: `xla` is not one of the three, or "on" under op determinism or under a strategy that needs
            CPU collectives.
    """
    from keras_vit.training import op_determinism_enabled

    if xla not in ("auto", "on", "off"):
        raise ValueError(f"`xla` must be 'auto', 'on' or 'off'. Received: xla={xla!r}")
    if xla == "off":
        return False, None
    if xla == "auto" and backend() == "torch":
        return False, ("the PyTorch backend: Keras' jit_compile there is torch.compile, which Keras marks "
                       "experimental; training without it (--xla on asks for it)")
    if op_determinism_enabled():
        if xla == "on":
            raise ValueError("--xla on: TensorFlow's op determinism is on (TF_DETERMINISTIC_OPS=1 or "
                             "tf.config.experimental.enable_op_determinism()), and Keras never compiles with XLA "
                             "then (use --xla auto or off to train deterministically without XLA, or unset "
                             "TF_DETERMINISTIC_OPS to train with XLA)")
        return False, ("op determinism is on (TF_DETERMINISTIC_OPS=1): training deterministically without XLA, "
                       "which Keras turns off under op determinism (unset TF_DETERMINISTIC_OPS to train with XLA)")
    if needs_cpu_collectives(strategy):
        if xla == "on":
            raise ValueError("--xla on: TensorFlow cannot compile cross-replica collectives for CPU devices with XLA "
                             "(use GPUs or TPUs for XLA, or --xla auto/off)")
        return False, ("training without XLA: TensorFlow cannot compile cross-replica collectives for CPU devices "
                       "(use GPUs or TPUs for XLA)")
    if xla == "auto" and precision == "mixed_bfloat16" and cpu_only(strategy):
        return False, ("mixed_bfloat16 on CPU: training without XLA, whose CPU bfloat16 kernels are slower than "
                       "TensorFlow's oneDNN ones (--xla on to force it)")
    return True, None


def cluster_spec():
    """Returns the parsed `TF_CONFIG` dict, or None when it is not set.

    Raises:
        ValueError: `TF_CONFIG` is set but is not JSON with "cluster" and "task".
    """
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return None
    try:
        config = json.loads(raw)
        config["cluster"], config["task"]["type"], int(config["task"]["index"])
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"TF_CONFIG must be JSON with 'cluster' and 'task' (type, index). Received: {raw[:200]!r}") from None
    return config


def is_chief(strategy=None):
    """True for the process that writes files: single-process runs, the chief, or worker 0 without a chief.

    Other workers of a multi-worker run train as well but must not write the
    shared outputs (Keras' multi-worker guide).
    """
    config = cluster_spec()
    if config is None:
        return True
    task = config["task"]
    if task["type"] == "chief":
        return True
    return task["type"] == "worker" and int(task["index"]) == 0 and "chief" not in config["cluster"]


def shard(dataset):
    """Returns `dataset` with the sharding that suits an in-memory or generated pipeline.

    `tf.distribute` shards a dataset across workers by file when it can; the
    keras_vit pipelines read arrays, image folders or TFDS records through
    maps, so each worker takes every n-th batch instead
    (`AutoShardPolicy.DATA`). On one worker this changes nothing.
    `.class_names` and `.num_examples` are kept.
    """
    tf = tensorflow("tf.distribute strategies (keras_vit.distribute, keras-vit-train --strategy)")

    if not isinstance(dataset, tf.data.Dataset):
        raise TypeError(f"`dataset` must be a tf.data.Dataset. Received: {type(dataset).__name__}")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    sharded = dataset.with_options(options)
    for attr in ("class_names", "num_examples"):
        if hasattr(dataset, attr):
            setattr(sharded, attr, getattr(dataset, attr))
    return sharded


def prepare_fit(model, dataset, strategy):
    """Works around two bugs of Keras 3.15's `fit` under `MultiWorkerMirroredStrategy` (keras-team/keras#20585).

    1. Before its first step `fit` builds the optimizer and metrics from a
       first batch that it averages across workers with an eager
       `strategy.reduce`, which fails ("Attempt to convert a value
       (PerReplica...) to a Tensor"). Here that build is done up front from
       zeros shaped like `dataset.element_spec` (no batch is read, so the
       data order stays as it was), and `fit`'s own attempt is skipped.
    2. Each step's scalar logs (loss, metrics) are averaged across workers
       over an axis 0 they do not have. Here they get one.
    Other strategies are left alone. Call it after `compile`, before `fit`.

    Raises:
        ValueError: `dataset` has an element whose shape is not fully known
            apart from the batch axis.
    """
    tf = tensorflow("tf.distribute strategies (keras_vit.distribute, keras-vit-train --strategy)")

    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return model

    def zeros(spec):
        shape = [1 if i == 0 and d is None else d for i, d in enumerate(spec.shape)]
        if any(d is None for d in shape):
            raise ValueError(f"Every dataset element needs a known shape apart from the batch axis. Received {spec}")
        return tf.zeros(shape, spec.dtype)

    batch = tf.nest.map_structure(zeros, dataset.element_spec)
    with strategy.scope():
        model._symbolic_build(data_batch=batch)
    model._maybe_symbolic_build = lambda *args, **kwargs: None

    # Then each step's logs are averaged across workers with `strategy.reduce("MEAN", v, axis=0)`, which
    # fails on the scalar logs ("Invalid reduction dimension 0 for input with 0 dimensions"): give them
    # a length-1 axis to be averaged over.
    def with_axis(step):
        def wrapped(data):
            return tf.nest.map_structure(lambda v: tf.reshape(v, [1]) if v.shape.rank == 0 else v, step(data))

        return wrapped

    model.train_step = with_axis(model.train_step)
    model.test_step = with_axis(model.test_step)
    return model
