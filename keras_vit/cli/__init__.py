"""The `keras-vit-*` command lines' own helpers: flag text and errors (`text`, `args`), quiet start-up
(`console`), a run's files (`run_files`), `--init-from` (`init_from`), `--weights` (`train_weights`).

The commands themselves stay where users call them: `python -m keras_vit.train` (keras_vit/train.py) and
`python -m keras_vit.pretrain` (keras_vit/pretrain.py). Nothing is imported here, so `import keras_vit`
reaches `cli.console` without loading the rest.
"""
