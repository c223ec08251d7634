"""`keras-vit-export` (also `python -m export`): export a keras_vit model and verify every artifact.

    keras-vit-export runs/demo/model.keras --calibration-data digits --output-dir runs/demo/export

Exit status: 0 when every artifact passed, 1 when one failed verification
(named in the message; no file is left under its name), 2 for bad input.
"""

import argparse
import json
import shlex
import sys

from export import _cli_text
from export.fast_path import slow_on_cpu
from export.input_range import RANGES, parse_input_range, range_name
from export.onnx_quantization import ONNX_QUANTIZATIONS
from export.output_folder import FORMATS
from export.litert_quantization import LITERT_QUANTIZATIONS
from export.modes import FLOAT32, ONNX, names
from export.tflite import (CALIBRATED, DEFAULT_QUANTIZATIONS, DYNAMIC_SIZE_QUANTIZATIONS, IO_TYPES, QUANTIZATIONS,
                           REFUSED)
from keras_vit.common import cli_text as _cli
from keras_vit.common import console as _console
from keras_vit.common import files as _files


def _input_range(value):
    """argparse's type for --input-range: the range's name, e.g. "0,255" ("0.0,255.0" and "[0, 255]" too)."""
    try:
        return range_name(parse_input_range(value, "--input-range"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).replace("--input-range must", "must")) from None


def _and(items):
    """"a, b and c" for a list of names."""
    items = list(items)
    return ", ".join(items[:-1]) + (" and " if len(items) > 1 else "") + items[-1]


def build_parser():
    """Returns the `argparse.ArgumentParser` of `keras-vit-export`."""
    p = _cli.ArgumentParser(prog="keras-vit-export", description=__doc__.splitlines()[0])  # "did you mean" on typos
    p.add_argument("model", help="a keras_vit model saved as .keras")
    p.add_argument("--formats", default=",".join(FORMATS), help=f"comma list of {', '.join(FORMATS)} (default: all)")
    p.add_argument(
        "--quantization", default=",".join(DEFAULT_QUANTIZATIONS),
        help=f"TFLite modes, comma list of {', '.join(QUANTIZATIONS)} (default: {','.join(DEFAULT_QUANTIZATIONS)}, "
             f"TensorFlow's converter; {_and(LITERT_QUANTIZATIONS)} are made by LiteRT Quantizer, package "
             f"litert-quantizer; {_and(CALIBRATED)} are calibrated on --calibration-data; docs/export.md has the table)",
    )
    onnx_default = ",".join(names("onnx", default=True))
    p.add_argument("--onnx-quantization", default=onnx_default,
                   help=f"ONNX modes, comma list of {', '.join(ONNX_QUANTIZATIONS)} (default: {onnx_default}): "
                        + "; ".join(f"{m.file_name} ({m.help})" for m in ONNX.values()))
    p.add_argument("--calibration-data", default=None, metavar="digits|FOLDER|TFDS-NAME",
                   help="calibration images for int8 and held-out images for verification; an image folder is split "
                        "80/20 into the two (default: a seeded random batch)")
    p.add_argument("--labels", default=None, metavar="FILE",
                   help="class names, one per line (default: the model's own, which keras-vit-train stores, else the "
                        "calibration data set's, else 0..n-1)")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--include-preprocessing", action="store_true",
                   help="artifacts take raw pixels in [0, 255] (input 'pixels', file names ending in _pixels) and "
                        "scale them inside the graph")
    p.add_argument("--input-range", default=None, type=_input_range, metavar="|".join(RANGES),
                   help="the pixel range the model takes (default: read from its first layers: keras_vit's "
                        "include_preprocessing or preprocess_input, Rescaling, Normalization; else -1,1)")
    p.add_argument("--int8-io-type", choices=list(IO_TYPES), default=FLOAT32)
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    p.add_argument("--no-latency", action="store_true", help="skip the latency measurement")
    p.add_argument("--profile", action="store_true",
                   help="add each .tflite file's op profile to report.json (op types, tensor types, ops on XNNPACK "
                        "and why the others are not, time per op type unless --no-latency) and print it")
    p.add_argument("--batch-size", choices=["1", "dynamic"], default="1",
                   help=".tflite files: a fixed batch of 1 (default; what phones run, no shape ops) or a dynamic batch")
    p.add_argument("--scores", choices=["probabilities", "logits"], default="probabilities",
                   help="what classifier artifacts output: probabilities (default; a softmax in the graph when the "
                        "head has none) or the head's raw logits")
    p.add_argument("--no-mediapipe", action="store_true", help="skip the MediaPipe ImageClassifier check of .tflite files")
    p.add_argument("--web-check", action="store_true",
                   help="also verify each .tflite and .onnx file in headless Chromium (MediaPipe Tasks for Web, "
                        "onnxruntime-web) against its own bars; needs Chromium, playwright and the npm packages that "
                        "make install puts in export/web (exits 2 naming what is missing, before any work)")
    p.add_argument("--web", metavar="DIR", default=None,
                   help="also write a static page to DIR that classifies a picked, dropped or camera image in the "
                        "browser with the float32 .tflite file (serve it: python3 -m http.server --directory DIR)")
    p.add_argument("--image-size", default=None, metavar="H[,W]|dynamic",
                   help="export at another resolution, in pixels, multiples of the patch size: a fixed-size model is "
                        "resized (keras_vit.resize, its position table resampled once); a model of any resolution "
                        "keeps dynamic SavedModel/ONNX files (verified at H,W and a second size) and gets .tflite "
                        "files of H x W (default: its table's grid x patch size); 'dynamic': .tflite files of "
                        f"dynamic height and width too ({', '.join(DYNAMIC_SIZE_QUANTIZATIONS)})")
    p.add_argument("--overwrite", action="store_true", help="replace existing artifacts")
    _console.add_verbose_argument(p, help="0: errors only; 1: progress, the table, warnings, one line naming the "
                                  "devices, no converter noise (default); 2: everything TensorFlow and LiteRT print")
    return _cli.complete_help(p)  # every flag's default in --help


def main(argv=None):
    """Console entry point; returns 0, or exits 1 (verification failed), 2 (bad input) or 143 (SIGTERM).

    A SIGTERM removes the staging folder and every temporary file, and ends the
    process with status 143 (`keras_vit.common.files.exit_on_sigterm`).
    """
    with _files.exit_on_sigterm(), _console.output_filter(_console.CONVERTER_NOISE):  # from _console.start() on
        return _main(argv)


def _main(argv):
    parser = build_parser()
    args = parser.parse_args(argv)
    _console.start(parser.prog, args.verbose)  # TensorFlow's start-up noise filtered, one line naming the devices
    from export.contract import format_contracts
    from export.pipeline import export_plan, format_table
    from export.plan import make_plan
    from export.signature import load_vit
    from export.verify import VerificationError
    from export.web_check import WebCheckUnavailable
    from export.web_page import check_page_model, check_page_runtime, check_page_target, choose_artifact, write_page

    try:
        _cli_text.check_arguments(args, FORMATS, QUANTIZATIONS, REFUSED, ONNX_QUANTIZATIONS)  # before the data is read
        _files.check_writable_folder(args.output_dir, "--output-dir")  # before any conversion, not after it
        if args.web is not None:
            check_page_target(args.web, args.output_dir, args.overwrite)
            _files.check_writable_folder(args.web, "--web")
            check_page_runtime()
        model = load_vit(args.model)
        plan = make_plan(  # every argument checked and parsed once, against the model, before any work
            model,
            args.output_dir,
            formats=args.formats,
            quantizations=args.quantization,
            calibration_data=args.calibration_data,
            labels=args.labels,
            include_preprocessing=args.include_preprocessing,
            int8_io_type=args.int8_io_type,
            opset=args.opset,
            overwrite=args.overwrite,
            measure_latency=not args.no_latency,
            profile=args.profile,
            batch_size=None if args.batch_size == "dynamic" else 1,
            scores=args.scores,
            mediapipe=not args.no_mediapipe,
            onnx_quantization=args.onnx_quantization,
            image_size=args.image_size,
            input_range=args.input_range,
            web_check=args.web_check,
            flags=_cli_text.FLAGS,
        )
        if args.web is not None:
            if "tflite" not in plan.formats:
                raise ValueError(f"--web runs a .tflite file: add tflite to --formats. Received: --formats={args.formats}")
            check_page_model(model, args.scores, plan.image_size)
        if slow_on_cpu(plan.tflite_modes):
            print(slow_on_cpu(plan.tflite_modes), flush=True)
        report = export_plan(plan)
        if args.web is not None:
            page = write_page(args.web, choose_artifact(report)["path"], report["labels"], report["model"],
                              overwrite=args.overwrite)
    except (ValueError, FileExistsError, WebCheckUnavailable) as e:
        parser.exit(2, f"{parser.prog}: error: {_cli_text.flag_names(e)}\n")
    except VerificationError as e:
        report = {}
        try:
            with open(f"{args.output_dir}/report.json") as f:
                report = json.load(f)
            print(format_table(report))
            print("\nWhat an app feeds each file that passed and gets back (also in report.json, \"contract\"):")
            print(format_contracts({**report, "artifacts": [r for r in report.get("artifacts", []) if r["passed"]]}))
        except OSError:
            pass
        tip = _cli_text.what_to_try(report)  # more training, other images, or the mode left out
        if args.web is not None:
            tip = (tip + f"\n{parser.prog}: " if tip else "") + f"no page written to {args.web}: the export failed"
        parser.exit(1, f"{parser.prog}: {_cli_text.flag_names(e)}\n" + (f"{parser.prog}: {tip}\n" if tip else ""))
    except Exception as e:  # an image of the calibration data that TensorFlow cannot decode
        if type(e).__name__ != "InvalidArgumentError":
            raise
        first = str(e).strip().splitlines()[0][:300]
        parser.exit(2, f"{parser.prog}: error: the calibration data could not be read: {first}\n")
    print(format_table(report))
    print("\nWhat an app feeds each file and gets back (also in report.json, \"contract\"):")
    print(format_contracts(report))
    if args.profile:
        from export.profile import format_profile

        for row in report["artifacts"]:
            if "profile" in row:
                print(format_profile(row["profile"]))
    print(f"wrote {args.output_dir}/report.json")
    if args.web is not None:
        print(f"wrote the page {page}: serve it with `python3 -m http.server --directory {shlex.quote(page)}` and "
              "open http://localhost:8000")
    return 0


if __name__ == "__main__":
    sys.exit(main())
