# CPU evidence for a recipe change: trains the v1 recipe (the demo_model package at a git commit) and the current
# recipe at the same tiny scale (model_config.CPU_COMPARE sizes, each recipe's own QSA budget, same steps, batch,
# warm-up and seed), then prints both loss curves and both held-out scores (greedy exact and teacher-forced) per kind.
# Run from the repo root:  python3 engine/tools/demo_model/compare_recipes.py --out /tmp/compare [--steps 300]
import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
V1_COMMIT = "9eb2e52"  # the commit that trained the v1 demo model (shipped until v2)
SIZES_FROM = "engine/tools/demo_model/model_config.py"

# Runs a recipe's own train.main() with the tiny config replaced by CPU_COMPARE plus the recipe's own QSA budget.
WRAPPER = """
import json, sys
sys.argv = json.loads(sys.argv[1])
sys.path.insert(0, ".")
from demo_model import train
train.TINY = dict(json.loads({sizes!r}), indexer_budget=train.DEMO["indexer_budget"])
train.main()
"""


def export_v1(root: Path) -> Path:
    """The v1 tree (demo_model package, chat template) under root, with this recipe's tf_score.py added."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", V1_COMMIT, "engine/tools/demo_model",
                              "gateway/text/templates"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(root)], input=archive, check=True)
    shutil.copy(REPO / "engine/tools/demo_model/tf_score.py", root / "engine/tools/demo_model/tf_score.py")
    return root


def export_current(root: Path) -> Path:
    """A snapshot of the working tree's demo_model package and chat template under root, so edits made while the
    comparison runs do not reach it."""
    if root.exists():
        shutil.rmtree(root)
    for part in ("engine/tools/demo_model", "gateway/text/templates"):
        shutil.copytree(REPO / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def run_recipe(name, tools_dir: Path, out: Path, args, sizes):
    """Train (skipped when its train_log.json exists) and score one recipe; returns (train_log, tf scores)."""
    out.mkdir(parents=True, exist_ok=True)
    log_path = out / "train_log.json"
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")  # one thread: the CPU is shared
    if not log_path.exists():
        argv = ["train", "--out", str(out), "--tiny", "--device", "cpu", "--steps", str(args.steps),
                "--warmup", str(args.warmup), "--tokens-per-batch", str(args.tokens_per_batch),
                "--conversations", str(args.conversations), "--eval-per-kind", str(args.eval_per_kind),
                "--workers", "2"] + (["--max-seconds", "1e9"] if name != "v1" else [])
        print(f"== training {name} in {tools_dir}", flush=True)
        with open(out / "train_stdout.txt", "w") as stdout:
            subprocess.run([sys.executable, "-c", WRAPPER.format(sizes=json.dumps(sizes)), json.dumps(argv)],
                           cwd=tools_dir, env=env, stdout=stdout, stderr=subprocess.STDOUT, check=True)
    tf_path = out / "tf_score.json"
    if not tf_path.exists():
        result = subprocess.run([sys.executable, "-m", "demo_model.tf_score", str(out), "--per-kind",
                                 str(args.tf_per_kind)], cwd=tools_dir, env=env, capture_output=True, text=True,
                                check=True)
        tf_path.write_text(result.stdout.strip().splitlines()[-1] + "\n")
    return json.loads(log_path.read_text()), json.loads(tf_path.read_text())


def print_report(results):
    names = list(results)
    print("\n## Loss (main next-token, assistant tokens) every 25 steps")
    print("| step | " + " | ".join(f"{n} loss | {n} mtp" for n in names) + " |")
    print("|---" * (1 + 2 * len(names)) + "|")
    curves = {n: {e["step"]: e for e in results[n][0]["steps"]} for n in names}
    for step in sorted(set.intersection(*(set(c) for c in curves.values()))):
        cells = [f"{curves[n][step]['loss']:.3f} | {curves[n][step]['mtp_loss']:.3f}" for n in names]
        print(f"| {step} | " + " | ".join(cells) + " |")
    print("\n## Held-out, greedy exact (transformers) and teacher-forced final answer exact / token accuracy")
    groups = sorted(set.union(*(set(results[n][0]["eval"]["greedy"]) | set(results[n][1]) for n in names)))
    print("| kind | " + " | ".join(f"{n} greedy | {n} tf answer | {n} tf tokens" for n in names) + " |")
    print("|---" * (1 + 3 * len(names)) + "|")
    for group in groups:
        cells = []
        for n in names:
            greedy = results[n][0]["eval"]["greedy"].get(group, {})
            tf = results[n][1].get(group, {})
            cells.append(" | ".join([
                f"{greedy['exact']:.3f} (n={greedy['n']})" if greedy else "-",
                f"{tf['answer_exact']:.3f}" if tf else "-", f"{tf['token_accuracy']:.3f}" if tf else "-"]))
        print(f"| {group} | " + " | ".join(cells) + " |")
    for n in names:
        log = results[n][0]
        print(f"\n{n}: {log.get('train_steps')} steps in {log.get('train_seconds')} s; "
              f"teacher-forced overall {log['eval']['teacher_forced']}; mtp {log['eval']['mtp_acceptance']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--tokens-per-batch", type=int, default=2048)
    parser.add_argument("--conversations", type=int, default=16000)
    parser.add_argument("--eval-per-kind", type=int, default=8)
    parser.add_argument("--tf-per-kind", type=int, default=32)
    parser.add_argument("--only", choices=["v1", "v2"], help="train and score one recipe only")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "engine/tools"))
    from demo_model.model_config import CPU_COMPARE
    trees = {"v1": lambda: export_v1(args.out / "v1_tree") / "engine/tools",
             "v2": lambda: export_current(args.out / "v2_tree") / "engine/tools"}
    results = {}
    for name in ("v1", "v2"):
        if args.only and name != args.only:
            if (args.out / name / "tf_score.json").exists():
                results[name] = (json.loads((args.out / name / "train_log.json").read_text()),
                                 json.loads((args.out / name / "tf_score.json").read_text()))
            continue
        tree = args.out / f"{name}_tree/engine/tools"
        tools_dir = tree if (args.out / name / "train_log.json").exists() else trees[name]()
        results[name] = run_recipe(name, tools_dir, args.out / name, args, CPU_COMPARE)
    print_report(results)


if __name__ == "__main__":
    main()
