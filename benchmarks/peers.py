"""The other sides of `benchmarks.run`'s throughput tables (issue 30, item 1): Hugging Face's PyTorch ViT, eager and
under `torch.compile`, and keras_vit itself on Keras' JAX and PyTorch backends.

Each function builds its model in the process it runs in and returns images/s (median over `steps` timed steps after
`warmup` untimed ones; compilation happens in the warm-up). keras_vit on another backend needs `KERAS_BACKEND` set
before Keras is first imported: `benchmarks.run` runs those jobs in a child process with it set (`backend_env`).

timm's `vit_*_patch16_224` would be a third PyTorch peer; it needs torchvision, which has no CPU build for the
pinned torch 2.13 in this project's registry (the CUDA build's operators do not load against the CPU torch), so it is
not measured here (benchmarks/findings/peers-torch-compile-jax.md).
"""

import os

import numpy as np

from benchmarks.timing import median_seconds

BACKENDS = {"jax": "keras_vit (JAX)", "torch": "keras_vit (PyTorch backend)"}


def backend_env(backend):
    """The environment of a child process that runs Keras on `backend` ("tensorflow", "jax" or "torch")."""
    return {**os.environ, "KERAS_BACKEND": backend}


def torch_model(config, image, classes=1000):
    """Hugging Face's `ViTForImageClassification` of `config` = (hidden, layers, heads, mlp, patch); random init."""
    import torch
    import transformers

    hidden, layers, heads, mlp, patch = config
    torch.set_num_threads(os.cpu_count() or 1)
    cfg = transformers.ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                 intermediate_size=mlp, image_size=image, patch_size=patch, num_labels=classes,
                                 layer_norm_eps=1e-6)
    return transformers.ViTForImageClassification(cfg)


def torch_train_step(config, image, batch, bf16, compiled=False):
    """A zero-argument call: one training step of HF's ViT (AdamW, clipping at norm 1); bfloat16 through
    `torch.autocast`; `compiled`: the forward pass under `torch.compile` (inductor), the backward pass through its AOT
    autograd (it compiles on the first calls)."""
    import torch

    model = torch_model(config, image).train()
    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (batch, 3, image, image)).astype("float32"))
    y = torch.arange(batch) % 1000

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(forward(pixel_values=x).logits.float(), y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def torch_infer_call(config, image, batch, compiled=False):
    """A zero-argument call: HF's ViT in float32 under `torch.inference_mode`, eager or under `torch.compile`."""
    import torch

    model = torch_model(config, image).eval()
    forward = torch.compile(model) if compiled else model
    x = torch.from_numpy(np.random.default_rng(0).uniform(-1, 1, (batch, 3, image, image)).astype("float32"))

    def call():
        with torch.inference_mode():
            return forward(pixel_values=x)

    return call


def train_torch(config, image, batch, steps, warmup, bf16, compiled=False):
    """Images/s of `torch_train_step`."""
    return batch / median_seconds(torch_train_step(config, image, batch, bf16, compiled), steps, warmup)


def infer_torch(config, image, batch, steps, warmup, compiled=False):
    """Images/s of `torch_infer_call`."""
    return batch / median_seconds(torch_infer_call(config, image, batch, compiled), steps, warmup)


def infer_backend(model, batch, steps, warmup):
    """keras_vit's `model` on the backend Keras runs: JAX as one `jax.jit` of `stateless_call` (what
    `model.predict` compiles), PyTorch eagerly under `torch.inference_mode`."""
    import keras

    x = np.random.default_rng(0).uniform(-1, 1, (batch, *model.input_shape[1:])).astype("float32")
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        non_trainable = [v.value for v in model.non_trainable_variables]
        forward = jax.jit(lambda t, n, v: model.stateless_call(t, n, v, training=False)[0])
        x = jax.numpy.asarray(x)
        return batch / median_seconds(lambda: forward(trainable, non_trainable, x).block_until_ready(), steps, warmup)
    import torch

    x = torch.from_numpy(x)

    def call():
        with torch.inference_mode():
            model(x, training=False)

    return batch / median_seconds(call, steps, warmup)


def keras_hub_model(name, config, image, classes):
    """keras-hub's `ViTBackbone` of `config`, its class token through a float32 Dense head: logits."""
    import keras
    from keras_hub.models import ViTBackbone

    hidden, layers, heads, mlp, patch = config
    inputs = keras.Input((image, image, 3))
    backbone = ViTBackbone(image_shape=(image, image, 3), patch_size=patch, num_layers=layers, num_heads=heads,
                           hidden_dim=hidden, mlp_dim=mlp)
    tokens = backbone(inputs)
    logits = keras.layers.Dense(classes, dtype="float32")(tokens[:, 0])
    return keras.Model(inputs, logits, name=f"keras_hub_{name}")
