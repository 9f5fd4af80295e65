"""Train a small neural network on scikit-learn's handwritten digits (a real, CPU-sized job).

The 1,797 8×8 digit images ship inside scikit-learn (``sklearn.datasets.load_digits``), so nothing
is downloaded. An MLPClassifier is trained epoch by epoch with ``partial_fit``; every epoch prints
the training loss and the train / test accuracy. The job also prints the GPUs it was given
(``CUDA_VISIBLE_DEVICES``) and the ``GPUQUEUE_*`` variables the queue sets, and writes a JSON result:

    {"accuracy": 0.97, "trainAccuracy": 0.99, "epochs": 10, "seed": 0, "devices": "0",
     "workload": "train-digits-x7k2q", "wallSeconds": 2.1, "history": [{"epoch": 1, ...}, ...]}

to ``--out`` (default ``results/digits-<GPUQUEUE_WORKLOAD_NAME or 'local'>.json`` under the current
folder). Takes a few seconds on a CPU.

    python train_digits.py --epochs 10 --seed 0
    jupyter gpuqueue submit --gpus 1 -- python examples/train_digits.py --epochs 5

From a notebook: ``runpy.run_path("examples/train_digits.py", run_name="__main__")`` or
``runpy.run_path(...)["main"](["--epochs", "3"])``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Train an MLP on scikit-learn's handwritten digits.")
    p.add_argument("--epochs", type=int, default=10, help="passes over the training set (default 10)")
    p.add_argument("--seed", type=int, default=0, help="random seed for the split and the weights")
    p.add_argument("--out", default=None,
                   help="JSON result file (default results/digits-<GPUQUEUE_WORKLOAD_NAME or local>.json)")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error("--epochs must be >= 1")
    return args


def _cli_argv():
    """Command-line arguments, or none inside a Jupyter kernel (whose argv is the kernel's own)."""
    if "ipykernel" in sys.modules and any("ipykernel" in a for a in sys.argv[:1]):
        return []
    return sys.argv[1:]


def main(argv=None) -> dict:
    args = parse_args(argv)
    t0 = time.time()

    devices = os.environ.get("CUDA_VISIBLE_DEVICES")
    print(f"CUDA_VISIBLE_DEVICES={devices if devices is not None else '(not set)'}", flush=True)
    for k in sorted(os.environ):
        if k.startswith("GPUQUEUE_"):
            print(f"{k}={os.environ[k]}", flush=True)

    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.25, random_state=args.seed, stratify=y
    )
    scaler = StandardScaler().fit(X_train)
    X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
    classes = np.unique(y)
    print(f"digits: {len(X_train)} training and {len(X_test)} test images, {X.shape[1]} pixels, "
          f"{len(classes)} classes", flush=True)

    model = MLPClassifier(hidden_layer_sizes=(128, 64), learning_rate_init=1e-3, batch_size=64,
                          alpha=1e-4, random_state=args.seed)
    rng = np.random.default_rng(args.seed)
    history = []
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(X_train))
        model.partial_fit(X_train[order], y_train[order], classes=classes)
        train_acc = float(model.score(X_train, y_train))
        test_acc = float(model.score(X_test, y_test))
        history.append({"epoch": epoch, "loss": float(model.loss_), "trainAccuracy": train_acc,
                        "testAccuracy": test_acc})
        print(f"epoch {epoch:3d}/{args.epochs}  loss {model.loss_:.4f}  "
              f"train acc {train_acc:.4f}  test acc {test_acc:.4f}", flush=True)

    workload = os.environ.get("GPUQUEUE_WORKLOAD_NAME") or "local"
    out = args.out or os.path.join("results", f"digits-{workload}.json")
    result = {
        "accuracy": history[-1]["testAccuracy"],
        "trainAccuracy": history[-1]["trainAccuracy"],
        "epochs": args.epochs,
        "seed": args.seed,
        "devices": devices,
        "workload": workload,
        "wallSeconds": round(time.time() - t0, 3),
        "history": history,
    }
    folder = os.path.dirname(os.path.abspath(out))
    os.makedirs(folder, exist_ok=True)
    tmp = out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    os.replace(tmp, out)
    print(f"test accuracy {result['accuracy']:.4f} after {args.epochs} epochs in "
          f"{result['wallSeconds']:.1f} s; result written to {out}", flush=True)
    return result


if __name__ == "__main__":
    main(_cli_argv())
