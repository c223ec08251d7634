"""Keras' own quantisation (`model.quantize`) of the Dense layers inside keras_vit's composite layers, kept by `.keras` files.

`keras.Model.quantize("int8" | "int4" | ...)` quantises every leaf layer
that supports it: in a ViT the `Dense` and `EinsumDense` layers, among them
those inside `PatchEncoder` (projection) and `TransformerBlock` (attention
query, key, value, output; the MLP). A leaf's dtype policy becomes, e.g.,
"int8_from_float32". A `.keras` file rebuilds a layer from its config, but
a composite layer's config carries only its own dtype policy, so its
sublayers came back as float and loading failed ("Layer 'projection'
expected 2 variables, but received 3"). `QuantizedSublayers` records the
quantised sublayers' policies in the composite layer's config
(`quantized_sublayers`: {path below the layer: serialised policy}) and
quantises those sublayers again when the layer is built, so the saved
weights load into the same variables.
"""

import keras


def quantization_summary(model):
    """None for a float model; for one with layers quantised by `model.quantize`, a phrase naming how many, their
    mode and the first: "model 'vit' was quantised with model.quantize (13 int8 layers, the first 'patch_encoder/
    projection')". The loaders and compile_model refuse such models with it."""
    quantized = [layer for layer in model._flatten_layers() if getattr(layer, "quantization_mode", None)]
    if not quantized:
        return None
    return (f"model {model.name!r} was quantised with model.quantize ({len(quantized)} "
            f"{quantized[0].quantization_mode} layers, the first {quantized[0].path!r})")


class QuantizedSublayers:
    """Mixin for keras_vit layers that own quantisable sublayers (see the module docstring).

    Pass `quantized_sublayers` from the config to `_init_quantized_sublayers`
    in `__init__`, call `_quantize_sublayers_as_saved()` at the end of
    `build`, and merge `_quantized_sublayers_config()` into `get_config`.
    """

    def _init_quantized_sublayers(self, quantized_sublayers):
        if quantized_sublayers is not None and not (
            isinstance(quantized_sublayers, dict) and all(isinstance(k, str) for k in quantized_sublayers)
        ):
            raise ValueError(
                "`quantized_sublayers` must be None or a dict {sublayer path: dtype policy config}, as "
                f"get_config writes it. Received: quantized_sublayers={quantized_sublayers!r}"
            )
        self._saved_sublayer_policies = dict(quantized_sublayers or {})

    def _sublayers_by_path(self):
        prefix = (self.path or self.name) + "/"
        for layer in self._flatten_layers(include_self=False):
            if layer.path and layer.path.startswith(prefix):  # a layer outside any scope (no variables) has none
                yield layer.path[len(prefix):], layer

    def _quantize_sublayers_as_saved(self):
        """Gives each sublayer named in the config its saved quantised dtype policy (Keras then quantises it)."""
        if not self._saved_sublayer_policies:
            return
        found = dict(self._sublayers_by_path())
        missing = sorted(set(self._saved_sublayer_policies) - set(found))
        if missing:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: the config names quantised sublayers this layer does not "
                f"have: {missing}. Received: quantized_sublayers={self._saved_sublayer_policies!r}"
            )
        for path, policy in self._saved_sublayer_policies.items():
            layer = found[path]
            if layer.quantization_mode is not None:
                continue
            policy = keras.dtype_policies.deserialize(policy)
            block_size = getattr(policy, "block_size", None)
            if policy.quantization_mode == "int4" and block_size is not None:
                # Assigning the policy would quantise with Keras' default block size (128), whatever the policy
                # says ("int4/-1", "int4/8"): the saved variables then do not fit (issue 29). Quantise with the
                # saved block size instead; Keras sets the same policy.
                layer.quantize("int4", config=keras.quantizers.Int4QuantizationConfig(block_size=block_size))
            else:
                layer.dtype_policy = policy

    def _quantized_sublayers_config(self):
        """{"quantized_sublayers": {...}} when a sublayer is quantised, else {} (configs of float models unchanged)."""
        quantized = {
            path: keras.dtype_policies.serialize(layer.dtype_policy)
            for path, layer in self._sublayers_by_path()
            if layer.quantization_mode is not None
        }
        return {"quantized_sublayers": quantized} if quantized else {}
