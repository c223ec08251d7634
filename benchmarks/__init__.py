"""Benchmarks: scripts that print tables and never assert a time (findings in benchmarks/findings/).

    run.py            make bench: throughput against peers and this machine's peak (throughput_tables.py)
    edge.py           the edge table: every TFLite and ONNX mode of ViT-Ti/16 and S/16 (edge_models.py: its
                      trained judges; edge_bars.py: the bars; edge_merge.py; edge_peer.py: a PyTorch peer)
    recipes.py        the small-data recipes against a CNN on digits
    profile_depth.py, profile_matmul.py, op_time.py, quant_error.py   where the time and the error go
    export_time.py, export_tolerance.py, token_tolerance.py, image_folder.py, int8_graph.py,
    litert_modes.py, onnx_int8.py, onnx_fusion.py, tflite_batch.py, web_latency.py   one question each
                      (their docstrings say which)
    machine.py        the CPU and its matrix units, named in every table; timing.py: interleaved rounds
"""
