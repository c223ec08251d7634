"""How `VisionTransformer(weights=NAME|FILE)` reaches the checkpoint loader without `models` importing `weights`.

`keras_vit.weights` builds models, so the model modules must not import it (docs/contributing.md,
"Layers"). Instead `keras_vit.weights` registers its loader here when it is imported, which
`import keras_vit` (and so every `import keras_vit.<module>`) does before any model is built.
"""

_LOADER = {}


def register(*, is_name, resolve, load):
    """Registers the checkpoint side of `weights=` (called once, by `keras_vit.weights.builder_weights`).

    Args:
        is_name: `is_name(weights) -> bool`, True for a name of `keras_vit.weights.CHECKPOINTS`.
        resolve: `resolve(weights, config, input_shape, resnet_num_layers) -> Checkpoint`, the published
            checkpoint a name means for the model being built, where `config` is `(patch_size,
            hidden_size, num_layers, num_heads, mlp_dim)`; raises ValueError if there is none.
        load: `load(model, weights)`, `keras_vit.weights.load_pretrained`.
    """
    _LOADER.update(is_name=is_name, resolve=resolve, load=load)


def loader(what):
    """The registered function `what` ("is_name", "resolve" or "load").

    Raises:
        RuntimeError: if `keras_vit.weights` was never imported (it always is after `import keras_vit`).
    """
    if what not in _LOADER:
        raise RuntimeError("`weights=` with a checkpoint needs keras_vit.weights, which registers its loader when "
                           "imported; run `import keras_vit` first")
    return _LOADER[what]
