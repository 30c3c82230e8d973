"""The tiny CPU policy: a few-million-parameter Qwen2 model and its own tokenizer.

Everything is built here from nothing (no download): a word-level tokenizer trained on
the catalog's text and the action grammar, with a ChatML template so that
``apply_chat_template`` works, and a randomly initialised ``Qwen2ForCausalLM``. The
warm start (supervised learning on demonstrations) is in :mod:`trainer.bootstrap.build`.

Why whole words: the policy acts by copying a product id, an option value or instruction
words from its prompt. When an id like ``b0yw0i2zyn`` is six pieces a tiny model rarely
copies all of them right; here the BPE vocabulary is large enough for (almost) every
catalog word to be one token, and every product id (lower and upper case) is an added
token, so copying is pointing and prompts are short.

The tokenizer's pipeline is exactly the one ``transformers`` rebuilds for a ``qwen2``
checkpoint (``AutoTokenizer`` always loads ``Qwen2Tokenizer`` there, keeping only the
vocabulary, merges and added tokens): NFC, the Qwen2 split regex, byte-level BPE. Any
other pipeline would tokenize differently once loaded than while training.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

PAD = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = [PAD, IM_START, IM_END, *ROLE_TOKENS]
ACTION_GRAMMAR = [
    "search[",
    "click[",
    "]",
    "back to search",
    "next >",
    "< prev",
    "buy now",
    "description",
    "features",
    "reviews",
    "attributes",
]
# ChatML with one special token per role: "<|im_start|><|user|>\n...<|im_end|>\n".
# System messages are left out: the agent's system prompt is the action grammar in English
# prose, constant from step to step; a model this small learns the grammar from the
# demonstrations, not from prose, and leaving it out makes every prompt a third shorter,
# which is a third less training and sampling time on a CPU.
CHAT_TEMPLATE = (
    "{% for message in messages if message['role'] != 'system' %}"
    "{{ '<|im_start|><|' + message['role'] + '|>\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|><|assistant|>\\n' }}{% endif %}"
)


@dataclass(frozen=True)
class TinySize:
    """Shape of the tiny model."""

    vocab_size: int = 8192
    """BPE vocabulary size (special tokens included; the whole-word tokens come on top)."""
    hidden_size: int = 128
    """Width of the residual stream."""
    layers: int = 3
    """Transformer blocks."""
    heads: int = 4
    """Attention heads (key/value heads: half as many)."""
    intermediate_size: int = 341
    """Width of the MLP."""
    max_positions: int = 4096
    """Longest sequence the rotary embedding is configured for."""


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, words: Iterable[str] = ()
) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (any text encodes) in the Qwen2 pipeline, with the chat
    template and role tokens; each of ``words`` (product ids) is one token wherever it
    stands as a word of its own."""
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_with_grammar(texts), trainer=trainer)
    tok.add_tokens(
        [AddedToken(w, single_word=True, normalized=False) for w in dict.fromkeys(words)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        additional_special_tokens=[IM_START, *ROLE_TOKENS],
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def _with_grammar(texts: Iterable[str]) -> Iterable[str]:
    for _ in range(50):
        yield " ".join(ACTION_GRAMMAR)
    yield from texts


def build_model(tokenizer: PreTrainedTokenizerFast, size: TinySize, seed: int) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM sized by ``size`` for ``tokenizer``."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden_size,
        intermediate_size=size.intermediate_size,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=max(1, size.heads // 2),
        max_position_embeddings=size.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return Qwen2ForCausalLM(config).eval()


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
