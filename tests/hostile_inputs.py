"""The crafted pastes and queries that stalled the first version, shared by the hostile-input
tests and `bench/hostile.py`. Before the fix, parsing the pastes took from 3 s to over 150 s."""

PASTES = {
    "a frame line then 64,000 spaces": 'Traceback (most recent call last):\n  File "x.py", '
    "line 1, in f" + " " * 64_000 + "x\nValueError: boom",
    "32,000 autolinks": "<http://" * 32_000,
    "a 1 MB [W] Warning: line": "[W] Warning: " + "x (function " * 76_000,
    "a megabyte of one-line errors": ("ValueError: \n[1,\n" * 60_000)[:990_000],
    "nested Markdown links": "[a](http://" * 90_000,
    "torch then 60,000 spaces": "torch" + " " * 60_000 + "x",
    "deep C++ frames": "frame #0: " + " (0x1 in " * 100_000,
    # Every line opens a repr that never closes: reading each one's continuation took 2.7 s.
    "60,000 unclosed reprs": "RuntimeError('a\n" * 60_000,
    # Chinese text runs into capitals on every line: when Chinese ended an error name's prefix
    # but `\w` let the name run on through Chinese, each line took 20 ms (2 s in all).
    "110 lines of Chinese and capitals": ("中A" * 2_000 + "\n") * 110,
    # Rank copies of 10,000 errors, then the same in reverse: collapsing them took 41 s at
    # 20,000 when each repeat searched a list for its first copy.
    "10,000 rank errors, then repeated in reverse": "".join(
        f"[rank0]: ValueError: m{i}\n[rank0]:\n" for i in (*range(10_000), *range(9_999, -1, -1))
    ),
}
QUERIES = {
    "26 one-letter wildcards": " ".join(f"{c}*" for c in "abcdefghijklmnopqrstuvwxyz"),
    "a range over everything": "[a TO z]",
    "a field range": "title:[a TO zzzz]",
    "double negation": "NOT NOT cuda",
    "a quoted phrase": '"out of memory"',
    "a lone star": "*",
    "many two-letter wildcards": " ".join(f"c{c}*" for c in "abcdefghijklmnopqrstuvwxyz"),
    "2,000 characters": "cuda " * 400,
}


def hostile_text(n_chars: int) -> str:
    """For redaction: shapes that make backtracking regexes slow, many times over, in one line."""
    unit = (
        "api_key " + " " * 40 + "x secret_secret_secret_ password=" + "=" * 20 + ' "a"a"a'
        " aaaa:aaaa:aaaa:aaaa:: 1.1.1.1.1.1 /a/b/c/d/e/f/g/h a-b-c-d-1-2-3 "
        "x@y@z.z.z eyJ.eyJ. 'Authorization: Basic "
        + "Ab1" * 12
        + "' /home/u/"
        + "d/" * 30
        + " https://u:p@h-1.acme.io:80/p?a=1&b=2 ::ffff:1.2.3.4 gpu-node-1:29500 "
    )
    return (unit * (n_chars // len(unit) + 1))[:n_chars]
