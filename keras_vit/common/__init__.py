"""What every part of keras_vit shares and nothing else: argument checks (`validation`), the running Keras
backend (`backend`), write-then-move files (`files`), and the command lines' quiet start-up (`console`) and flag
text (`cli_text`), which `import keras_vit` and keras-vit-convert need too. Imports nothing of keras_vit's own."""
