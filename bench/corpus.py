"""A generated corpus shaped like our entries: prose, identifiers, error messages, Chinese."""

import random
from dataclasses import dataclass
from datetime import UTC, datetime

from app.models import ENTRY_KINDS, Entry, Signature

WORDS = """
tensor gradient model layer batch training loss optimizer memory device shape weight bias
module checkpoint dataset loader worker kernel backward forward parameter buffer scheduler
learning rate precision float integer index dimension stride view reshape contiguous copy
error warning silent value result output input target label class sample epoch step norm
dropout activation convolution pooling linear embedding attention sequence hidden state
process thread queue signal timeout deadlock rank group broadcast reduce gather scatter cuda
driver version library compile build export trace script graph node edge leaf grad
accumulate clip scale overflow underflow nan infinity random seed deterministic benchmark
pin transfer async stream event synchronize allocate release cache fragment reserve peak
""".split()  # noqa: SIM905 (a word list reads best as text)
CJK_WORDS = """
显存 显存不足 不连续 共享内存 踩坑 梯度 损失 模型 训练 推理 数据 加载 多卡 分布式 精度 随机种子 学习率
优化器 卷积 池化 批量 维度 形状 设备 报错 警告 内存泄漏 死锁
""".split()  # noqa: SIM905
MODULES = ["torch", "nn", "cuda", "optim", "utils", "data", "amp", "distributed", "jit", "onnx"]
CLASSES = [
    "FloatTensor",
    "DataLoader",
    "BatchNorm2d",
    "GradScaler",
    "DistributedSampler",
    "CrossEntropyLoss",
    "LayerNorm",
    "Conv2d",
    "MultiheadAttention",
    "LSTM",
]
ATTRS = [
    "num_batches_tracked",
    "running_mean",
    "weight_decay",
    "local_rank",
    "grad_fn",
    "requires_grad",
    "pin_memory",
    "num_workers",
    "state_dict",
    "param_groups",
]


def identifier(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.4:
        return f"{rng.choice(MODULES)}.{rng.choice(MODULES)}.{rng.choice(CLASSES)}"
    if kind < 0.8:
        return f"layer{rng.randint(1, 9)}.{rng.choice(ATTRS)}"
    return rng.choice(ATTRS)


def sentence(rng: random.Random, words: int, cjk: float = 0.05, ident: float = 0.05) -> str:
    out = []
    for _ in range(words):
        roll = rng.random()
        if roll < cjk:
            out.append(rng.choice(CJK_WORDS))
        elif roll < cjk + ident:
            out.append(f"`{identifier(rng)}`")
        else:
            out.append(rng.choice(WORDS))
    return " ".join(out).capitalize() + "."


def body(rng: random.Random) -> str:
    parts = []
    for heading in ("What you see", "Why it happens", "Fix"):
        parts.append(f"## {heading}\n")
        parts.extend(sentence(rng, rng.randint(12, 30)) for _ in range(rng.randint(2, 5)))
        parts.append("")
    code = "\n".join(f"x{i} = {identifier(rng)}({rng.choice(WORDS)}={i})" for i in range(6))
    parts.append(f"```python fix\nimport torch\n{code}\n```\n")
    return "\n".join(parts)


@dataclass
class GeneratedEntry:
    entry: Entry
    signatures: list[Signature]


def generate(count: int, seed: int = 7) -> list[GeneratedEntry]:
    rng = random.Random(seed)
    tags = [f"tag-{w}" for w in WORDS[:40]]
    now = datetime.now(UTC)
    out = []
    for number in range(count):
        entry_id = f"entry-{number:05d}-{rng.choice(WORDS)}"
        text = body(rng)
        message = f"{sentence(rng, 8, cjk=0, ident=0.15)} got {rng.randint(1, 512)}"
        entry = Entry(
            id=entry_id,
            title=sentence(rng, rng.randint(5, 9), cjk=0, ident=0.15),
            summary=sentence(rng, rng.randint(15, 25)),
            kind=rng.choice(ENTRY_KINDS),
            tags=rng.sample(tags, rng.randint(1, 3)),
            aliases=[*rng.sample(CJK_WORDS, 2), rng.choice(WORDS)],
            body_markdown=text,
            body_html="",
            content_hash="0" * 64,
            updated_at=now,
        )
        signature = Signature(
            entry_id=entry_id,
            position=0,
            exception="RuntimeError",
            message="x",
            example=f"RuntimeError: {message}",
        )
        out.append(GeneratedEntry(entry, [signature]))
    return out


QUERIES = [
    "gradient",
    "memory",
    "checkpoint",
    "stride",
    "deadlock",
    "overflow",
    "scheduler",
    "embedding",
    "worker",
    "synchronize",
    "contiguous",
    "precision",
    "benchmark",
    "allocate",
    "reduce",
    "gradient memory",
    "batch training",
    "loader worker",
    "device shape",
    "learning rate",
    "cuda driver",
    "checkpoint weight",
    "backward graph",
    "random seed",
    "peak memory",
    "num_batches_tracked",
    "FloatTensor",
    "torch.cuda.FloatTensor",
    "running_mean",
    "DataLoader",
    "batches tracked",
    "weight decay",
    "local rank",
    "grad fn",
    "pin memory",
    "显存",
    "不连续",
    "共享内存",
    "梯度",
    "随机种子",
]
