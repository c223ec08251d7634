"""`export_all`: every requested format and quantisation, verified, then moved into place."""

import json
import os
import tempfile
import time

import numpy as np

from keras_vit.common import files as _files
from export.input_range import RANGES, UNIT, UNREAD, describe, scale
from export.modes import FLOAT32, ONNX
from export.onnx_fusion import fused_nodes
from export.plan import make_plan
from export.output_folder import FORMATS, artifact_file, earlier_files, manifest_file
from export.signature import ServingGraph, prepare
from export.sizes import is_dynamic, model_image_shape
from export.tflite import CALIBRATED, DEFAULT_QUANTIZATIONS
from export.app_files import check as check_app_files, held_out_files
from export.images import DEFAULT_CALIBRATION_STEPS, load_data
from export.calibration import check_calibrated_files
from export.contract import artifact_contract, check_keras_accuracy, label_names as _label_names
from export.fast_path import fast_path
from export.scores import CLASSLESS, CLASSLESS_OUTPUTS, describe_output
from export.tolerances import FEATURES_NOTE, MEDIAPIPE_FEATURES, MEDIAPIPE_TOKENS, TOKENS_NOTE
from export.verify import NOISE_HINT, Artifact, VerificationError, decision_failure, resized_images, verify
from export.web_check import check_in_browser, runtimes as web_runtimes


def export_all(
    model,
    output_dir,
    formats=FORMATS,
    quantizations=DEFAULT_QUANTIZATIONS,
    calibration_data=None,
    labels=None,
    include_preprocessing=False,
    int8_io_type=FLOAT32,
    opset=17,
    overwrite=False,
    measure_latency=True,
    profile=False,
    batch_size=1,
    scores="probabilities",
    mediapipe=True,
    onnx_quantization=FLOAT32,
    image_size=None,
    input_range=None,
    web_check=False,
):
    """Exports, verifies and writes every requested artifact plus `report.json`.

    One float32 serving graph (`export.signature.ServingGraph`) is traced
    and written once; every format is converted from it. A model trained
    under a mixed or low-precision dtype policy (`mixed_bfloat16`,
    `mixed_float16`, `bfloat16`, `float16`) is exported as the float32
    computation of its weights, and the report records the policy
    (`dtype_policy`). Each artifact is written into a hidden staging folder
    inside `output_dir`, verified in its own runtime against that float32
    model (see `export.verify`), and only then moved to its final name
    (`saved_model/`, `model_{quantization}.tflite`, `model.onnx`; with
    `include_preprocessing` each ends in `_pixels`, see `artifact_file`). A
    failed artifact is deleted; the others still land; `report.json` records
    all, a conversion failure with its one-line cause first (`failures`) and
    the converter's output after (`details`), and for each artifact what an
    app feeds it and gets back (`contract`: input name, dtype, shape, value
    range, fixed or dynamic batch, output kind and dtype, and the app's
    preprocessing, read from the file itself: `export.contract`).

    The input contract: the range the model takes is read from its first
    layers (`export.input_range.model_input_range`: keras_vit's
    `include_preprocessing`, `keras_vit.preprocess_input`, `Rescaling`,
    `Normalization`), or given as `input_range`; calibration and
    verification images are fed in that range, and the TFLite metadata
    tells the app how to scale pixels. With labelled verification data the
    Keras model's own accuracy is checked first: near chance, where another
    input range would make it accurate, the export stops with a
    `VerificationError` naming that range; near chance under every range, a
    warning says so (`report["warnings"]`).

    Class names: `labels` if given, else those the model's head carries
    (`keras_vit.layers.model_class_names`: `keras-vit-train` stores them),
    else the calibration data set's, else "0".."n-1" with a one-line notice.

    Args:
        model: a built keras_vit model (any dtype policy; nested in another
            model too, e.g. `keras.Sequential([vit])`).
        output_dir: folder for the artifacts.
        formats: list or comma string of "saved_model", "tflite", "onnx".
        quantizations: TFLite modes, of `export.tflite.QUANTIZATIONS`
            (default `DEFAULT_QUANTIZATIONS`, TensorFlow's converter's four;
            int16x8, int8_mixed16 and the weight-only modes need
            `litert-quantizer`).
        calibration_data: None, "digits", an image folder, a TFDS name, a
            NumPy array of images or a `tf.data.Dataset` (see
            `export.images.load_data`); its held-out split is used for
            verification (an array or dataset: its images themselves).
        labels: class names (list) or a labels file path (one per line) for
            the TFLite metadata and `labels.txt`; default: the model's own
            (see above), the data set's class names, or "0".."n-1".
        include_preprocessing: bool; artifacts take raw pixels in [0, 255]
            (input `pixels`; file names end in `_pixels`) and scale them to
            the model's range in the graph.
        int8_io_type: "float32", "int8" or "uint8" for the int8 file.
        opset: ONNX opset, default 17.
        overwrite: bool; replace existing artifacts of the same names.
        measure_latency: bool; batch-1 latency per artifact.
        scores: "probabilities" (default: a softmax in the graph when the
            head has none, scores an app can threshold) or "logits" (the
            head's raw outputs); see `export.scores.score_kind`. The report
            records what the artifacts output ("scores").
        onnx_quantization: ONNX modes, list or comma string of
            `export.onnx_quantization.ONNX_QUANTIZATIONS` ("float32" ->
            `model.onnx`, "dynamic_int8" -> `model_dynamic_int8.onnx`, "int8"
            -> `model_int8.onnx`, calibrated on the TFLite int8 file's
            images, "float32_fused" -> `model_float32_fused.onnx`, float32
            with onnxruntime's fused ops, for onnxruntime alone, opset >= 17,
            its report row counting them in "fused_nodes",
            `export.onnx_fusion`); default "float32".
        mediapipe: bool, default True: also run each .tflite file in
            MediaPipe Tasks' `ImageClassifier` (`export.mediapipe_check`),
            skipped with one message when mediapipe is not installed.
        profile: bool; True adds each TFLite artifact's op profile
            (`export.profile.tflite_profile`, 1 thread: op types, tensor
            types, what XNNPACK takes and why not, and, with
            `measure_latency`, batch-1 latency with and without XNNPACK
            and each op's time, timed alone) under "profile".
        batch_size: 1 (default: what phones run; no shape ops, 2 XNNPACK
            partitions on a float32 ViT) or None (dynamic batch) for the
            TFLite files; the SavedModel and ONNX files keep a dynamic batch.
            See `export.tflite.export_tflite`.
        image_size: None (default), (height, width) or "H,W" / "S" in
            pixels, multiples of the patch size (times the hybrid's stride),
            or "dynamic" (`export.sizes.parse_image_size`). A fixed-size
            model given another size is exported at that size:
            `keras_vit.resize(model, (H, W, C))`, its position table
            resampled once (the report records `resized_from`). A model of
            any resolution (`input_shape=(None, None, C)`) keeps a dynamic
            height and width in its SavedModel and ONNX files, each verified
            at two sizes (`image_size`, by default its table's grid times
            the patch size, and `export.signature.other_image_size`); its
            TFLite files are fixed at `image_size`, or with "dynamic" keep a
            dynamic height and width (float32, float16 and dynamic_int8
            only: `export.tflite.DYNAMIC_SIZE_QUANTIZATIONS`), verified at
            the two sizes. The report lists the sizes checked per artifact
            (`verified_sizes`, `at_sizes`) and for the export
            (`verification_sizes`, `tflite_image_size`).
        web_check: bool, default False: also run each .tflite and .onnx file
            in a browser, headless Chromium (`export.web_check`: MediaPipe
            Tasks for Web, onnxruntime-web), against the file's own bars; a
            file that fails there does not land. Checked before any work:
            without Chromium, playwright or the npm packages,
            `export.web_check.WebCheckUnavailable` names what to install.
        input_range: None (default: read from the model's first layers) or
            the range the model takes: "-1,1", "0,1" or "0,255" (or the pair),
            `export.input_range.RANGES`.

    Returns:
        The report dict (also written to `output_dir/report.json`).

    Raises:
        ValueError: an unknown format or quantization, an int8 I/O type
            without the int8 file, an output path that is a file, labels or
            calibration classes that do not match the model (in number, or
            the model's own class names in name), a bad `input_range`; a bad
            `image_size` (names it and the patch size), or "dynamic" with a
            fixed-size model or a TFLite mode that cannot keep a dynamic size.
        export.web_check.WebCheckUnavailable: `web_check` without the
            browser runtime (before any work).
        FileExistsError: an artifact or report already exists, or an
            earlier export's artifact that this one does not make, and
            `overwrite` is False (checked before any work). With
            `overwrite`, an earlier export's artifacts that the new report
            does not list are removed once it lands (named in its
            `removed_earlier_files`; `export.output_folder`).
        VerificationError: after writing the report, if any artifact failed;
            before writing anything, if the Keras model is near chance on
            labelled verification images where another input range is not.
        Nothing is left behind by a refusal: an output folder the export
        made is removed again when it holds nothing.
    """
    return export_plan(make_plan(
        model, output_dir, formats=formats, quantizations=quantizations, calibration_data=calibration_data,
        labels=labels, include_preprocessing=include_preprocessing, int8_io_type=int8_io_type, opset=opset,
        overwrite=overwrite, measure_latency=measure_latency, profile=profile, batch_size=batch_size, scores=scores,
        mediapipe=mediapipe, onnx_quantization=onnx_quantization, image_size=image_size, input_range=input_range,
        web_check=web_check,
    ))


def export_plan(plan):
    """Runs a checked `export.plan.ExportPlan` (`make_plan`'s): what `export_all` does after its checks.

    Returns and raises as `export_all`, which documents the steps; a refused export removes an output folder it made
    when that holds nothing.
    """
    started = time.perf_counter()
    made_dir = not os.path.exists(plan.output_dir)
    try:
        return _export(plan, started)
    except BaseException:
        if made_dir and os.path.isdir(plan.output_dir) and not os.listdir(plan.output_dir):
            os.rmdir(plan.output_dir)  # a refused export leaves no empty folder behind
        raise


def _export(plan, started):
    """The serving graph, every artifact, the report."""
    model, resized_from = _at_size(plan.model, plan.image_size)
    size = plan.image_size
    graph_size = size if size != "dynamic" and is_dynamic(model) else None
    # From the first artifact moved into place until report.json lands, a SIGTERM (under the CLI's
    # exit_on_sigterm) removes the artifacts and labels.txt too: a killed export leaves no files without a report.
    finals = [*plan.targets, *map(manifest_file, plan.targets), plan.labels_path]
    try:
        # one float32 trace for every artifact (a model of any resolution: dynamic height and width)
        with ServingGraph(model, plan.include_preprocessing, scores=plan.scores, image_size=graph_size,
                          input_range=plan.input_range) as graph:
            _say_input(graph)
            if graph.source_policy != FLOAT32:
                print(f"the model was trained under the dtype policy {graph.source_policy!r}: exporting and "
                      "verifying the float32 computation of its weights", flush=True)
            report = _export_verified(graph, plan)
        if resized_from is not None:
            report["resized_from"] = list(resized_from)
        report["export_time_s"] = round(time.perf_counter() - started, 1)
        if plan.profile:
            from export.profile import tflite_profile

            for row in report["artifacts"]:
                if row["format"] == "tflite" and row["passed"]:
                    row["profile"] = tflite_profile(row["path"], num_threads=1, measure_latency=plan.measure_latency)
        kept = [name for row in report["artifacts"] if row["passed"]
                for name in (row["name"], *([manifest_file(row["name"])] if "calibration" in row else []))]
        earlier = earlier_files(plan.output_dir, kept) if plan.overwrite else []
        if earlier:  # an earlier export's files (--overwrite): the folder holds what its report names, no more
            report["removed_earlier_files"] = earlier
        with _files.staged(plan.report_path, plan.overwrite) as tmp:
            with open(tmp, "w") as f:
                json.dump(report, f, indent=2)
        for name in earlier:
            _files.remove(os.path.join(plan.output_dir, name))
        if earlier:
            print(f"removed an earlier export's {', '.join(earlier)} from {plan.output_dir} (not in this report)",
                  flush=True)
    finally:
        for path in finals:
            _files.untrack(path)
    failed = [f"{r['name']}: {'; '.join(r['failures'])}" for r in report["artifacts"] if not r["passed"]]
    if failed:
        hint = ""
        if plan.calibration_data is None and any(decision_failure(r) and r["quantization"] != FLOAT32
                                                 for r in report["artifacts"]):
            hint = f" ({NOISE_HINT.format(argument='calibration_data / --calibration-data')})"
        raise VerificationError("verification failed for " + " | ".join(failed) + hint)
    return report


def _say_input(graph):
    """One line: the range the model takes and how it was known; one more when --include-preprocessing adds nothing."""
    if graph.range_source.startswith(UNREAD):
        print(f"WARNING: the range the model takes is {graph.range_source}", flush=True)
    else:
        print(f"the model takes images in {describe(graph.model_range)}: {graph.range_source}", flush=True)
    if graph.include_preprocessing and graph.model_range == RANGES["0,255"]:
        print("the model already takes raw pixels in [0, 255]: --include-preprocessing adds no scaling "
              "(its files take the same input as the default ones)", flush=True)


def _at_size(model, size):
    """`(model, None)`, or for a fixed-size model and another `size` `(keras_vit.resize(model, size), its old size)`."""
    if size is None or size == "dynamic" or is_dynamic(model) or tuple(size) == model_image_shape(model)[:2]:
        return model, None
    from keras_vit.layers import PatchEncoder
    from keras_vit.resize import resize

    if not any(isinstance(layer, PatchEncoder) for layer in getattr(model, "layers", [])):
        raise ValueError(
            f"image_size (--image-size) {size[0]},{size[1]} resizes a keras_vit ViT itself, and {model.name!r} holds "
            "one nested inside it: export it at its own size, or resize the ViT (keras_vit.resize) and nest it again"
        )
    old = model_image_shape(model)
    print(f"resizing {model.name!r} from {old[0]}x{old[1]} to {size[0]}x{size[1]} (keras_vit.resize)", flush=True)
    return resize(model, (*size, old[2])), old[:2]


def _export_verified(graph, plan):
    """Converts every planned artifact from `graph`, verifies them, moves the good ones, writes labels and report."""
    from export.onnx import export_onnx
    from export.saved_model import export_saved_model
    from export.tflite import export_tflite

    include_preprocessing = graph.include_preprocessing
    calibration, eval_images, eval_labels, class_names = load_data(  # a folder that lacks a class: model's numbering
        plan.calibration_data, graph, class_names=None if graph.score_kind in CLASSLESS else [graph.class_names, plan.labels])
    tokens = graph.score_kind == "tokens"
    classless = graph.score_kind in CLASSLESS  # no labels, accuracy, agreement or MediaPipe classifier
    if classless:  # a token sequence, or a backbone's feature vector (keras-vit-pretrain): the data's images only
        what = describe_output(graph.score_kind, shape=False)
        shape = f"(batch, {graph.tokens}, {graph.classes})" if tokens else f"(batch, {graph.classes})"
        if plan.labels is not None:
            raise ValueError(f"labels (--labels) name classes, and the model outputs {what} {shape}: leave them out")
        label_names, label_source, eval_labels = None, f"none (the model outputs {what})", None
        note = (TOKENS_NOTE if tokens else FEATURES_NOTE).replace(CLASSLESS_OUTPUTS[graph.score_kind][1], shape)
        print(note + ("" if tokens or class_names is None else "; the calibration data's classes are not used"),
              flush=True)
        if plan.mediapipe and "tflite" in plan.formats:
            print(f"MediaPipe ImageClassifier check {MEDIAPIPE_TOKENS if tokens else MEDIAPIPE_FEATURES}", flush=True)
    else:
        label_names, label_source = _label_names(plan.labels, class_names, graph.classes, graph.class_names,
                                                 data_name=plan.calibration_data if isinstance(plan.calibration_data, str) else None)
    if label_source == "numbers":
        print(f"the model holds no class names: labels.txt and the .tflite files name its {graph.classes} classes "
              f"0..{graph.classes - 1} (pass --labels FILE, or train with keras-vit-train, which stores them)", flush=True)
    warnings = check_keras_accuracy(graph, eval_images, eval_labels)
    absent = [] if eval_labels is None or classless or graph.classes == 1 else \
        [str(label_names[k]) for k in sorted(set(range(graph.classes)) - set(np.asarray(eval_labels).reshape(-1).tolist()))]
    if absent:  # a folder that lacks a class (a fresh user's finding: it passed without a word)
        warnings.append(f"the {len(eval_labels)} verification images hold no image of class"
                        f"{'es' if len(absent) > 1 else ''} {', '.join(map(repr, absent[:10]))}"
                        f"{', ...' if len(absent) > 10 else ''} ({len(absent)} of the model's {graph.classes}): "
                        f"the files' decisions on {'them' if len(absent) > 1 else 'it'} are not verified")
        print(warnings[-1], flush=True)
    if graph.range_source.startswith(UNREAD):
        warnings.insert(0, f"the range the model takes is {graph.range_source}")
    calibration = scale(calibration, UNIT, graph.input_range)  # as the artifacts take them (raw pixels, ...)
    os.makedirs(plan.output_dir, exist_ok=True)
    stage = _files.track(tempfile.mkdtemp(dir=plan.output_dir, prefix=".tmp-export-"))  # removed by a SIGTERM too
    tflite_graph, owned = graph, False
    try:
        if "tflite" in plan.formats:  # one graph of the TFLite batch (and size) for every TFLite mode
            tflite_graph, owned = prepare(graph, include_preprocessing, plan.batch_size,
                                          dynamic_size=plan.image_size == "dynamic")
        def make(fmt, q, staged_path, samples):
            """Writes one artifact (unverified) from the graph, calibrated on `samples` where its mode is."""
            if fmt == "saved_model":
                export_saved_model(graph, staged_path, include_preprocessing, verify=False)
            elif fmt == "onnx":
                export_onnx(graph, staged_path, plan.opset, include_preprocessing, verify=False, quantization=q,
                            representative_data=samples if ONNX[q].calibrated else None)
            else:
                export_tflite(
                    tflite_graph,
                    staged_path,
                    quantization=q,
                    representative_data=samples if q in CALIBRATED else None,
                    io_type=plan.io_type(q),
                    metadata={"labels": label_names, "scores": graph.score_kind},
                    include_preprocessing=include_preprocessing,
                    batch_size=plan.batch_size,
                    verify=False,
                    image_size="dynamic" if tflite_graph.dynamic_size else None,
                )

        artifacts, errors = [], []
        for fmt, q in plan.artifacts:
            name = artifact_file(fmt, q, include_preprocessing)
            staged_path = os.path.join(stage, name)
            print(f"exporting {name} ...", flush=True)
            try:  # each is verified below, on the held-out images, all against the same float32 twin
                make(fmt, q, staged_path, calibration)
            except RuntimeError as e:  # a converter failed or wrote something broken: the first line says why
                cause, _, details = str(e).partition("\n")
                print(f"  failed: {cause}", flush=True)
                errors.append({"name": name, "format": fmt, "quantization": q, "passed": False, "path": None,
                               "failures": [cause], "details": details[:4000]})
                continue
            dynamic = (tflite_graph if fmt == "tflite" else graph).dynamic_size
            artifacts.append(Artifact(name, fmt, staged_path, q, include_preprocessing, graph.scores, dynamic,
                                      graph.input_range))

        # a dynamic-size artifact is checked at the graph's other size too, on the same images resized
        other_sizes = [(resized_images(eval_images, shape[:2]), eval_labels) for shape in graph.check_shapes[1:]]
        sizes = " and ".join("x".join(map(str, shape[:2])) for shape in graph.check_shapes)
        print(f"verifying {len(artifacts)} artifacts on {len(eval_images)} images ({sizes}) ...", flush=True)
        results = verify(graph, artifacts, eval_images, eval_labels, raise_on_failure=False,
                         measure_latency=plan.measure_latency, mediapipe=plan.mediapipe, other_sizes=other_sizes)
        if plan.web_check:
            print(f"verifying {len(artifacts)} artifacts in headless Chromium ...", flush=True)
            check_in_browser(graph, artifacts, results, eval_images, eval_labels, plan.measure_latency)
        apps_check = (plan.mediapipe or plan.web_check) and not classless
        files = held_out_files(plan.calibration_data, len(eval_images)) if apps_check else None
        app_files = None
        if files and any(row["format"] == "tflite" for row in results):  # as an app opens them (export.app_files)
            apps = " and ".join(["MediaPipe"] * plan.mediapipe + ["the --web page"] * plan.web_check)
            print(f"opening the {len(files)} verification files as {apps} does ...", flush=True)
            app_files = check_app_files(graph, results, files, eval_images, web=plan.web_check, mediapipe=plan.mediapipe)
        for row in results:  # keyed by the names the files carry (a fresh user could not tell that "0" meant "one")
            if label_names is not None and graph.classes > 1 and row.get("per_class_agreement"):  # binary: 0 and 1
                row["per_class_agreement"] = {str(label_names[int(c)]): v for c, v in row["per_class_agreement"].items()}
        calibration_warnings, diagnosis = check_calibrated_files(
            results, artifacts, make, graph, calibration[:DEFAULT_CALIBRATION_STEPS], plan.calibration_data, eval_images)
        warnings.extend(calibration_warnings)
        for row in results:
            row["contract"] = artifact_contract(row["path"], row["format"], graph)
            if row["format"] == "onnx" and ONNX[row["quantization"]].converter == "onnxruntime_transformers":  # what onnxruntime's optimizer fused (Attention, Gelu, ...)
                row["fused_nodes"] = fused_nodes(row["path"])
                made = ", ".join(f"{op} {n}" for op, n in row["fused_nodes"].items() if n) or "none"
                print(f"{row['name']}: onnxruntime's optimizer fused {made} (Attention {row['fused_nodes']['Attention']})",
                      flush=True)
        for row in results + errors:
            final = os.path.join(plan.output_dir, row["name"])
            if row["passed"]:
                _files.track(final)  # removed by a SIGTERM until report.json lands (export_all)
                _files.promote(row["path"], final, plan.overwrite)
                if "calibration" in row:  # its manifest beside it (export.calibration)
                    _files.track(manifest_file(final))
                    _files.promote(manifest_file(row["path"]), manifest_file(final), plan.overwrite)
            elif plan.overwrite:  # asked to replace it, and the new one failed: no older file stays under its name
                _files.remove(final)
                _files.remove(manifest_file(final))
            row["path"] = final if row["passed"] else None
        report = {
            "model": graph.source.name,
            "dtype_policy": graph.source_policy,
            "exported_computation": FLOAT32,
            "input_shape": list(graph.image_shape),
            "dynamic_size": graph.dynamic_size,
            "verification_sizes": [list(shape[:2]) for shape in graph.check_shapes],
            "tflite_image_size": "dynamic" if plan.image_size == "dynamic" else list(graph.image_shape[:2]),
            "classes": None if classless else graph.classes,
            "include_preprocessing": include_preprocessing,
            "model_input_range": list(graph.model_range),
            "model_input_range_source": graph.range_source,
            "input_range": list(graph.input_range),
            "labels": label_names,
            "labels_source": label_source,
            **({"tokens": graph.tokens, "hidden_size": graph.classes, "agreement": TOKENS_NOTE} if tokens else {}),
            **({"hidden_size": graph.classes, "agreement": FEATURES_NOTE} if classless and not tokens else {}),
            "warnings": warnings,
            "tflite_batch_size": plan.batch_size,
            "scores": graph.score_kind,
            "calibration_data": plan.calibration_data if isinstance(plan.calibration_data, (str, type(None))) else (
                "NumPy array" if isinstance(plan.calibration_data, np.ndarray) else "tf.data.Dataset"),
            "num_verification_images": int(len(eval_images)),
            "labelled": eval_labels is not None,
            **({"web_runtimes": web_runtimes()} if plan.web_check else {}),
            **({"app_files": app_files} if app_files else {}),
            **({"quantization_diagnosis": diagnosis} if diagnosis else {}),
            "artifacts": results + errors,
        }
        if not classless:
            _files.track(plan.labels_path)  # as the artifacts (export_all)
            with _files.staged(plan.labels_path, plan.overwrite) as tmp:
                with open(tmp, "w") as f:
                    f.write("\n".join(label_names) + "\n")
    finally:
        if owned:
            tflite_graph.close()
        _files.remove(stage)
    return report


def format_table(report):
    """The report as a Markdown table: artifact, size, max |diff| (absolute and relative to the outputs' scale),
    cosine, top-1 agreement (all flips, and decisive flips only), accuracy, latency, MediaPipe's top-1 agreement
    (and accuracy; "n/a" where MediaPipe does not run the file, "skipped" for a token sequence, "-" where it was
    not run), with `web_check` the browser's top-1 agreement (and accuracy, "n/a" where its runtime does not take
    the file, "-" where it was not run) and its batch-1 latency, where the file runs fast (`export.fast_path`:
    XNNPACK, reference kernels only, or an NPU), passed."""
    web = "web_runtimes" in report
    head = ("| artifact | size MB | max abs diff | relative | cosine | top-1 agreement (decisive) | accuracy (keras) "
            "| latency ms (batch 1) | MediaPipe top-1 (accuracy) | "
            + ("browser top-1 (accuracy) | browser latency ms | " if web else "") + "runs fast on | passed |")
    rows = [head, "|" + "---|" * (13 if web else 11)]
    for r in report["artifacts"]:
        acc = "-" if "accuracy" not in r else f"{r['accuracy']:.4f} ({r['keras_accuracy']:.4f})"
        fmt = lambda key, spec: "-" if r.get(key) is None else format(r[key], spec)  # noqa: E731
        agreement = "-" if r.get("top1_agreement") is None else f"{r['top1_agreement']:.4f} ({r['decisive_top1_agreement']:.4f})"
        mediapipe = ("n/a" if "mediapipe_unsupported" in r else "skipped" if "mediapipe_skipped" in r
                     else fmt("mediapipe_top1_agreement", ".4f"))
        if "mediapipe_accuracy" in r:
            mediapipe += f" ({r['mediapipe_accuracy']:.4f})"
        browser = ""
        if web:
            top1 = "n/a" if "web_unsupported" in r else fmt("web_top1_agreement", ".4f")
            if "web_accuracy" in r:
                top1 += f" ({r['web_accuracy']:.4f})"
            browser = f"{top1} | {fmt('web_latency_ms_batch1', '.3f')} | "
        rows.append(
            f"| {r['name']} | {fmt('size_mb', '.3f')} | {fmt('max_abs_diff', '.2e')} | {fmt('relative_max_abs_diff', '.1e')} | "
            f"{fmt('cosine', '.6f')} | {agreement} | {acc} | {fmt('latency_ms_batch1', '.3f')} | {mediapipe} | {browser}"
            f"{r.get('runs_fast_on') or fast_path(r['format'], r['quantization'])} | {'yes' if r['passed'] else 'NO'} |"
        )
    return "\n".join(rows)
