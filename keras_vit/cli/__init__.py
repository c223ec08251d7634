"""The `keras-vit-*` command lines' own helpers: their argument groups and flag names (`args`), a run's files
(`run_files`), `--init-from` (`init_from`), `--weights` (`train_weights`).

The commands themselves stay where users call them: `python -m keras_vit.train` (keras_vit/train.py) and
`python -m keras_vit.pretrain` (keras_vit/pretrain.py). What the package itself needs of a command line (the
quiet start-up, flag text and "did you mean") is in `keras_vit.common` (`console`, `cli_text`), so no module
below the command lines imports this folder.
"""
