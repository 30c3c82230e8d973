"""Weight sync of the local backend's policy server: the whole model against a LoRA adapter.

A whole-weights sync hands the policy server a copy of the trained model
(``LocalBackend.swap``: ``copy.deepcopy``); a LoRA sync copies the adapter's tensors into
the served model in place (``PolicyServer.load_adapter``). Both are timed on the same
checkpoint, alternated ``--rounds`` times, each as the loop runs it (under the server's
lock, no batch in flight; the adapter's tensor pairs found once per run, as the backend
does). Prints each round and the medians' ratio.

    python benchmarks/lora_sync.py                          # SmolLM2 (wsrl model get smollm2-135m)
    python benchmarks/lora_sync.py --model PATH --rank 16
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.config import get_settings  # noqa: E402
from trainer.backends.local.learner import Learner  # noqa: E402
from trainer.backends.local.policy_server import PolicyServer  # noqa: E402
from trainer.config import Lora, TrainerConfig  # noqa: E402
from trainer.lora import AdapterCopy  # noqa: E402
from trainer.models import resolve_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a converted model or a folder")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    path = resolve_model(get_settings().data_dir, args.model) or Path(args.model)

    whole = Learner(path, TrainerConfig())
    adapted = Learner(path, TrainerConfig(), lora=Lora(rank=args.rank, alpha=2 * args.rank))
    whole_server = PolicyServer(copy.deepcopy(whole.model), whole.tokenizer)
    adapter_server = PolicyServer(copy.deepcopy(adapted.model), adapted.tokenizer)
    adapter = AdapterCopy(adapted.model, adapter_server.model)
    sent = adapter.numel
    total = sum(p.numel() for p in whole.model.parameters())
    print(f"{path}: {total / 1e6:.1f}M parameters; a rank-{args.rank} adapter {sent / 1e6:.2f}M")

    whole_s, adapter_s = [], []
    for version in range(1, args.rounds + 1):
        started = time.perf_counter()
        whole_server.swap(copy.deepcopy(whole.model), version)
        whole_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        adapter_server.load_adapter(adapter, version)
        adapter_s.append(time.perf_counter() - started)
        print(f"round {version}: whole model {whole_s[-1]:.4f} s, adapter {adapter_s[-1]:.4f} s")
    whole_median, adapter_median = statistics.median(whole_s), statistics.median(adapter_s)
    print(
        f"median: whole model {whole_median:.4f} s, adapter {adapter_median:.4f} s, "
        f"{whole_median / adapter_median:.0f}x"
    )


if __name__ == "__main__":
    main()
