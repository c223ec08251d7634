"""What every part of keras_vit shares and nothing else: argument checks (`validation`), the running Keras
backend (`backend`) and write-then-move files (`files`). Imports nothing of keras_vit's own."""
