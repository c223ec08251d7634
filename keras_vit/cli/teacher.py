"""`keras-vit-train --teacher`: DeiT's distillation from the command line (issue 46).

`--teacher MODEL.keras` loads a trained teacher; `--teacher cnn` trains
`keras.applications.MobileNetV3Small` (no weights) on the same data first,
for `--teacher-epochs`, and writes it beside the student as `teacher.keras`,
so a later run can pass that file. The student is then built with a
distillation token and trained by `keras_vit.distillation.Distiller`;
metrics.json records the teacher and its own held-out accuracy.
"""

import os
import time
import zipfile

from keras_vit.distillation import MAX_TEMPERATURE, check_teacher
from keras_vit.training import head_gives_logits

CNN = "cnn"
CNN_MIN_SIDE = 32  # MobileNetV3Small's smallest input side: smaller images are resized up inside the teacher
TEACHER_EPOCHS = 30  # --teacher cnn's training, as the recipes table's CNN
DEFAULT_TEMPERATURE = 1.0  # soft distillation's T without --temperature (keras_vit.distillation.Distiller's default)


def add_teacher_arguments(parser):
    """Adds --teacher, --teacher-epochs, --distillation and --temperature; returns the group."""
    group = parser.add_argument_group("distillation (DeiT, docs/recipes.md)")
    group.add_argument("--teacher", default=None, metavar="MODEL.keras|cnn",
                       help="train the ViT with a distillation token against this teacher (DeiT, "
                       "keras_vit.distillation): a .keras model that takes the same images and classes, or cnn: "
                       "keras.applications' MobileNetV3Small, trained here on the same data first and saved as "
                       "teacher.keras (default: none; the deit-distill recipe's is cnn)")
    group.add_argument("--teacher-epochs", type=int, default=None,
                       help=f"epochs of --teacher cnn's training (default {TEACHER_EPOCHS}, as the recipes table's "
                       "CNN); refused with a teacher file, which is trained already")
    group.add_argument("--distillation", choices=["hard", "soft", "none"], default=None,
                       help="hard: the teacher's decisions (DeiT's default); soft: its scores at --temperature "
                       "(default: the recipe's; hard with --teacher)")
    group.add_argument("--temperature", type=float, default=None,
                       help=f"soft distillation's temperature T, in (0, {MAX_TEMPERATURE:g}] (default "
                       f"{DEFAULT_TEMPERATURE:g}); refused with hard distillation, which has none")
    return group


def resolve(args, settings, pretrained=None):
    """The teacher and distillation the run uses, `(teacher or None, distillation or None)`; checked before any data.

    `settings` are the recipe's (its "distillation"), `pretrained` the `--weights` checkpoint
    (`keras_vit.cli.train_weights.Pretrained`) or None.

    A --teacher without a distillation setting distils "hard"; the deit-distill recipe without --teacher takes
    `cnn`. Raises ValueError naming the flag: a teacher file that does not exist or is not .keras,
    --distillation none with --teacher, --distillation without a teacher, --teacher with --init-from or
    --freeze-backbone, a bad --teacher-epochs or --temperature, --teacher-epochs with a teacher file or without a
    teacher, --temperature without soft distillation (each was silently ignored).
    """
    teacher, distillation = args.teacher, settings["distillation"]
    if args.teacher_epochs is not None and args.teacher_epochs < 1:
        raise ValueError(f"--teacher-epochs must be >= 1. Received: {args.teacher_epochs}")
    if args.temperature is not None and not 0 < args.temperature <= MAX_TEMPERATURE:  # NaN fails too
        raise ValueError(f"--temperature must be a number in (0, {MAX_TEMPERATURE:g}]. Received: {args.temperature}")
    if args.distillation == "none" and teacher is not None:
        raise ValueError(f"--distillation none turns distillation off; drop --teacher {teacher}")
    if teacher is None and distillation is not None:
        if args.distillation is not None:
            raise ValueError(f"--distillation {args.distillation} needs a teacher: give --teacher MODEL.keras or "
                             "--teacher cnn")
        teacher = CNN  # the deit-distill recipe
    if teacher is None:
        for flag, value, needs in (("--teacher-epochs", args.teacher_epochs, "--teacher cnn"),
                                   ("--temperature", args.temperature,
                                    "--teacher MODEL.keras or --teacher cnn, with --distillation soft")):
            if value is not None:
                raise ValueError(f"{flag} {value:g} sets distillation, and the run has no teacher: give {needs}, or "
                                 f"drop {flag}")
        return None, None
    distillation = distillation or "hard"
    if teacher != CNN and (not teacher.endswith(".keras") or not os.path.isfile(teacher)):
        raise ValueError(f"--teacher {teacher!r}: give an existing .keras model file, or cnn")
    if teacher != CNN and args.teacher_epochs is not None:  # it was silently ignored
        raise ValueError(f"--teacher-epochs {args.teacher_epochs} sets the training of --teacher cnn; --teacher "
                         f"{teacher} is trained already: drop --teacher-epochs")
    if distillation != "soft" and args.temperature is not None:
        raise ValueError(f"--temperature {args.temperature:g} is soft distillation's, and the run distils {distillation} "
                         "(the teacher's decisions, no temperature): add --distillation soft, or drop --temperature")
    for flag, value in (("--init-from", args.init_from), ("--freeze-backbone", args.freeze_backbone or None)):
        if value is not None:
            raise ValueError(f"--teacher trains a new student with a distillation token; drop {flag}")
    if pretrained is not None and not (pretrained.config or {}).get("distillation_token"):
        raise ValueError(f"--teacher trains a student with a distillation token, and --weights {args.weights} has "
                         "none: give a distilled (DeiT) checkpoint, or drop --weights")
    return teacher, distillation


def temperature(args):
    """Soft distillation's temperature T of the run: --temperature, else `DEFAULT_TEMPERATURE`."""
    return DEFAULT_TEMPERATURE if args.temperature is None else args.temperature


def teacher_epochs(args):
    """--teacher cnn's epochs: --teacher-epochs, else `TEACHER_EPOCHS`."""
    return TEACHER_EPOCHS if args.teacher_epochs is None else args.teacher_epochs


def cnn_teacher(image_size, classes):
    """`keras.applications.MobileNetV3Small` (no weights, logits) for `(height, width, 3)` images in [-1, 1].

    Its BatchNormalization momentum is 0.9 (keras.applications' 0.999 suits ImageNet's thousands of steps an epoch;
    on digits' 23 steps the moving statistics stay near their start: benchmarks/recipes.py). Images smaller than
    `CNN_MIN_SIDE` are resized up to it (bilinear) inside the teacher, so that it takes the student's images.
    """
    import keras

    height, width = image_size
    inputs = keras.Input((height, width, 3), name="images")
    x = inputs
    if min(height, width) < CNN_MIN_SIDE:
        scale = CNN_MIN_SIDE / min(height, width)
        height, width = round(height * scale), round(width * scale)
        x = keras.layers.Resizing(height, width, name="resize_for_cnn")(x)
    cnn = keras.applications.MobileNetV3Small(input_shape=(height, width, 3), weights=None, classes=classes,
                                              include_preprocessing=False, classifier_activation=None)
    for layer in cnn.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.momentum = 0.9
    return keras.Model(inputs, cnn(x), name="teacher_cnn")


def cnn_jit_compile():
    """XLA for `--teacher cnn`'s own training: False on TensorFlow without a GPU or TPU, else None (the run's).

    On CPUs XLA runs MobileNetV3Small slower than TensorFlow's own kernels: a training step at 32 px took 2.4x
    as long with XLA on an AMD EPYC Zen 3 (0.51 s against 0.21 s, batch 64; benchmarks/findings/
    distillation-demo.md). JAX has no other path than XLA.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        return None
    import tensorflow as tf

    return None if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU") else False


def teacher_model(teacher, args, train, val, student, compile_fn, write_fn):
    """The teacher as a Keras model, and its metrics.json entries.

    Args:
        teacher: a .keras path or `CNN`.
        args: the parsed flags (--teacher-epochs, --verbose).
        train, val: the run's pipelines (images in [-1, 1]).
        student: the distilled keras_vit ViT (its images and classes are the teacher's).
        compile_fn: `compile_fn(model, total_steps, warmup_steps, jit_compile=None)` compiles a model with the
            run's recipe (None: the run's XLA setting).
        write_fn: `write_fn(model)` saves the trained CNN teacher as teacher.keras (the chief only).

    Returns:
        `(model, {"teacher": "cnn" or the file's absolute path, "teacher_accuracy": held-out accuracy,
        "teacher_epochs": the CNN's epochs or None, "teacher_train_seconds": its model.fit's wall time or
        None})`; the model is frozen (`trainable=False`). The CNN's epochs are validated on `val` (their lines show
        its held-out accuracy).

    Raises:
        ValueError: a teacher file that does not load, or whose input or classes do not fit
            (`keras_vit.distillation.check_teacher`, before any training); the message starts with the flag.
    """
    import keras

    from keras_vit.losses import Accuracy

    if teacher == CNN:
        model = cnn_teacher(tuple(student.input_shape[1:3]), int(student.output_shape[-1]))
        epochs = teacher_epochs(args)
        steps = epochs * int(train.cardinality())
        compile_fn(model, steps, int(0.06 * steps), jit_compile=cnn_jit_compile())  # the recipe, 6% warm-up
        print(f"--teacher cnn: training MobileNetV3Small for {epochs} epoch{'s' if epochs != 1 else ''} first "
              "(saved as teacher.keras)", flush=True)
        started = time.perf_counter()
        model.fit(train, validation_data=val, epochs=epochs, verbose=args.verbose, shuffle=False)
        seconds = time.perf_counter() - started
        print(f"--teacher cnn: trained in {seconds:.0f} s", flush=True)
        write_fn(model)
        model.trainable = False  # frozen by the run itself: the Distiller's "it is frozen" line is for files
    else:
        if not zipfile.is_zipfile(teacher):  # Keras would say "File not found" of a file that is there
            raise ValueError(f"--teacher {teacher!r} is not a .keras file: a .keras file is a zip archive, and this "
                             "one is not (truncated or corrupted?); save the teacher with model.save('NAME.keras')")
        try:
            model = keras.saving.load_model(teacher)
        except Exception as e:  # a zip that is no Keras model, or one saved with layers not registered here
            raise ValueError(f"--teacher {teacher!r} could not be loaded: {type(e).__name__}: {str(e)[:200]}") from None
        epochs = seconds = None
        try:
            check_teacher(student, model)
            # the command line has no teacher_from_logits: the teacher's last layer has to say
            head_gives_logits(model, remedy=": end the teacher with a linear (logits) or softmax layer")
        except ValueError as error:
            raise ValueError(f"--teacher {teacher}: {error}") from None
        teacher = os.path.abspath(teacher)  # metrics.json names the file wherever it is read from
    accuracy = Accuracy()  # in inference mode, as the teacher runs in distillation and evaluate measures
    for images, labels in val:
        accuracy.update_state(labels, model(images, training=False))
    found, classes = float(accuracy.result()), int(student.output_shape[-1])
    print(f"--teacher: the teacher's held-out accuracy {found:.4f}, in inference mode", flush=True)
    if found < 2.0 / classes:  # under twice chance: its decisions teach the student little but noise
        print(f"WARNING: the teacher is near chance ({found:.1%}; chance {1 / classes:.1%}): "
              f"{'train it longer (--teacher-epochs)' if epochs else 'give a trained teacher'}", flush=True)
    return model, {"teacher": teacher, "teacher_accuracy": found, "teacher_epochs": epochs,
                   "teacher_train_seconds": seconds}
