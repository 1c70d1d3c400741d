"""The Paddle side of ``bench_cnn.py --infer``: run by the Python of an environment with PaddlePaddle (a separate
venv; Paddle is not a dependency of blockir), it exports ``paddle.vision.models`` as legacy ``.pdmodel`` files and
times Paddle Inference on them, on request.

    /path/to/paddle-venv/bin/python benchmarks/paddle_infer_side.py

It reads one JSON request per line on stdin and answers each with one line ``@@ {json}`` on stdout (other lines
on stdout are Paddle's own output, which the benchmark ignores). Requests:

- ``{"cmd": "export", "dir": D, "models": [...], "sizes": [...]}``: each model (a constructor of
  ``paddle.vision.models``, in eval mode, 1,000 classes) with a ``[-1, 3, S, S]`` input saved as ``D/NAME_S``;
- ``{"cmd": "load", "key": K, "prefix": P, "mkldnn": bool, "threads": T}``: a predictor of ``P.pdmodel`` with
  oneDNN on or off and T math-library threads;
- ``{"cmd": "run", "key": K, "input": X, "output": Y}``: one inference of the array in ``X.npy``, its first
  output saved to ``Y.npy``;
- ``{"cmd": "time", "key": K, "input": X, "n": N}``: seconds per inference over N inferences (input copied in
  and output copied out each time, as a user of the predictor does).
"""

import json
import os
import sys
import time

os.environ.setdefault("FLAGS_enable_pir_api", "0")  # legacy programs (.pdmodel), as blockir reads them

import numpy as np
import paddle


def export(directory, names, sizes):
    from paddle.vision import models

    paddle.enable_static()
    os.makedirs(directory, exist_ok=True)
    for name in names:
        for size in sizes:
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                x = paddle.static.data("x", [-1, 3, size, size], "float32")
                net = getattr(models, name)()
                net.eval()
                out = net(x)
            exe = paddle.static.Executor(paddle.CPUPlace())
            exe.run(startup)
            paddle.static.save_inference_model(os.path.join(directory, f"{name}_{size}"), [x], [out], exe, program=main)
    return {}


class Predictor:
    def __init__(self, prefix, mkldnn, threads):
        config = paddle.inference.Config(prefix + ".pdmodel", prefix + ".pdiparams")
        config.disable_gpu()
        config.set_cpu_math_library_num_threads(threads)
        if mkldnn:
            config.enable_mkldnn()
        else:
            config.disable_mkldnn()
        config.disable_glog_info()
        self.predictor = paddle.inference.create_predictor(config)
        self.input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self.output = self.predictor.get_output_handle(self.predictor.get_output_names()[0])

    def __call__(self, x):
        self.input.copy_from_cpu(x)
        self.predictor.run()
        return self.output.copy_to_cpu()


def main():
    predictors = {}
    for line in sys.stdin:
        request = json.loads(line)
        cmd = request["cmd"]
        try:
            if cmd == "export":
                answer = export(request["dir"], request["models"], request["sizes"])
            elif cmd == "load":
                predictors[request["key"]] = Predictor(request["prefix"], request["mkldnn"], request["threads"])
                answer = {}
            elif cmd == "run":
                np.save(request["output"], predictors[request["key"]](np.load(request["input"])))
                answer = {}
            elif cmd == "time":
                predictor, x, n = predictors[request["key"]], np.load(request["input"]), request["n"]
                start = time.perf_counter()
                for _ in range(n):
                    predictor(x)
                answer = {"seconds": (time.perf_counter() - start) / n}
            else:
                answer = {"error": f"unknown request {cmd!r}"}
        except Exception as e:  # noqa: BLE001  (the benchmark reports it)
            answer = {"error": f"{type(e).__name__}: {e}"}
        print("@@ " + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
