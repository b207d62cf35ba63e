"""Deterministic needle-in-a-haystack inputs for the PFlash tests: mixed prose and code filler.

A haystack is a sequence of paragraphs — prose from sentence templates, and Python-like code with
identifiers, numbers and comments — in a per-case mix (code share 20–80%), with the needle
"The special magic {word} number is: {7 digits}." placed between paragraphs at a chosen depth,
and a question at the end that asks for it. Numbers are everywhere in the filler (prices, line
counts, constants in code), so the digits alone do not make the needle stand out; repeated filler
sentences are avoided because they make any needle trivially salient (docs/algorithms.md §4.9).
"""
from __future__ import annotations

import dataclasses
import random

SUBJECTS = ["the committee", "our team", "the old harbour", "a junior analyst", "the museum", "the river valley",
            "each volunteer", "the regional office", "the night shift", "a visiting professor", "the orchestra",
            "the school board", "the bakery on Elm Street", "the survey crew", "her grandmother", "the startup"]
VERBS = ["reviewed", "postponed", "described", "rebuilt", "questioned", "celebrated", "measured", "ignored",
         "translated", "sold", "painted", "documented", "rearranged", "shipped", "inspected", "borrowed"]
OBJECTS = ["the quarterly budget", "a set of faded maps", "the winter schedule", "two hundred letters",
           "the broken bridge", "an unusual proposal", "the festival program", "a crate of oranges",
           "the county records", "a new irrigation plan", "the library catalogue", "three abandoned boats",
           "the safety manual", "a stack of invoices", "the garden fence", "a forgotten recipe"]
CLAUSES = ["after a long debate", "before the first snow", "without telling anyone", "in less than a week",
           "while the rain kept falling", "as the deadline approached", "for reasons nobody recalled",
           "despite the rising costs", "during the spring inspection", "with surprising care"]
EXTRAS = ["The total came to {n} dollars.", "About {n} people attended.", "It took {n} hours in the end.",
          "The file was {n} pages long.", "Nobody expected {n} replies.", "Room {n} stayed locked.",
          "The estimate was off by {n} percent.", "They counted {n} boxes twice."]

NAMES = ["load", "parse", "merge", "flush", "scale", "render", "index", "encode", "split", "fetch", "retry", "group"]
NOUNS = ["config", "buffer", "records", "tokens", "matrix", "session", "payload", "cache", "window", "events"]

NEEDLE_WORDS = ["lighthouse", "marigold", "porcupine", "saxophone", "avalanche", "tangerine", "labyrinth",
                "cathedral", "blueberry", "telescope", "hurricane", "pineapple", "wolverine", "harmonica",
                "sandcastle", "chameleon", "waterfall", "trombone", "cinnamon", "dragonfly", "volcano", "accordion"]


def prose_paragraph(rng: random.Random) -> str:
    out = []
    for _ in range(rng.randint(3, 6)):
        s = f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(CLAUSES)}."
        out.append(s[0].upper() + s[1:])
        if rng.random() < 0.4:
            out.append(rng.choice(EXTRAS).format(n=rng.randint(2, 98_000)))
    return " ".join(out)


def code_paragraph(rng: random.Random) -> str:
    fn = f"{rng.choice(NAMES)}_{rng.choice(NOUNS)}"
    a, b = rng.sample(NOUNS, 2)
    lines = [f"def {fn}({a}, {b}=None, limit={rng.randint(2, 4096)}):",
             f'    """{rng.choice(NAMES).capitalize()} the {a} into the {b}."""',
             f"    result = {{}}"]
    for _ in range(rng.randint(2, 5)):
        k = rng.choice(["for", "if", "assign", "call"])
        if k == "for":
            lines += [f"    for i, item in enumerate({a}):", f"        if i % {rng.randint(2, 64)} == 0:",
                      f"            result[item] = i * {rng.randint(2, 999)}"]
        elif k == "if":
            lines += [f"    if len({b} or []) > {rng.randint(1, 500)}:",
                      f"        raise ValueError('{b} too large: %d' % len({b}))"]
        elif k == "assign":
            lines.append(f"    {rng.choice(NOUNS)}_{rng.randint(0, 9)} = {rng.randint(0, 10**6)}  # {rng.choice(CLAUSES)}")
        else:
            lines.append(f"    {rng.choice(NAMES)}_{rng.choice(NOUNS)}(result, timeout={rng.uniform(0.1, 30):.2f})")
    lines.append("    return result")
    return "\n".join(lines)


@dataclasses.dataclass
class Needle:
    word: str
    number: str
    sentence: str         # "The special magic {word} number is: {number}."
    question: str         # asks for this needle's number; goes after the attachment
    depth: float          # where the sentence starts, as a fraction of the attachment's characters


@dataclasses.dataclass
class Haystack:
    attachment: str
    needles: list[Needle]
    code_share: float

    def span(self, needle: Needle, what: str | None = None) -> tuple[int, int]:
        """Byte range [start, end) of the needle sentence (or of `what` inside it) in the attachment."""
        start = self.attachment.index(needle.sentence)
        if what is not None:
            start += needle.sentence.index(what)
        end = start + len(what if what is not None else needle.sentence)
        return len(self.attachment[:start].encode()), len(self.attachment[:end].encode())


def make_haystack(seed: int, n_tokens: int, count_tokens, n_needles: int = 1) -> Haystack:
    """About n_tokens tokens (as counted by count_tokens(text) -> int) of filler with n_needles
    needles of distinct words, at depths spread over 25–75% of the text (jittered)."""
    rng = random.Random(seed)
    code_share = rng.uniform(0.2, 0.8)
    words = rng.sample(NEEDLE_WORDS, n_needles)
    numbers = [str(rng.randint(1_000_000, 9_999_999)) for _ in words]
    depths = [0.25 + 0.5 * (i + rng.uniform(0.1, 0.9)) / n_needles for i in range(n_needles)]

    paragraphs: list[str] = []
    text_tokens = 0
    while text_tokens < n_tokens:
        p = code_paragraph(rng) if rng.random() < code_share else prose_paragraph(rng)
        paragraphs.append(p)
        text_tokens += count_tokens(p) + 1
    sentences = [f"The special magic {w} number is: {n}." for w, n in zip(words, numbers)]
    budget = n_tokens - sum(count_tokens(s) + 2 for s in sentences)
    while len(paragraphs) > 1 and count_tokens("\n\n".join(paragraphs)) > budget:
        paragraphs.pop()
    # each needle goes to the paragraph boundary nearest its depth (later ones first: indices hold)
    total = sum(len(p) + 2 for p in paragraphs)
    starts = [0]
    for p in paragraphs:
        starts.append(starts[-1] + len(p) + 2)
    slots = [min(range(len(paragraphs) + 1), key=lambda i: abs(starts[i] - d * total)) for d in depths]
    for slot, sentence in sorted(zip(slots, sentences), reverse=True):
        paragraphs.insert(slot, sentence)
    attachment = "\n\n".join(paragraphs)
    needles = [Needle(w, n, s, f"\n\nQuestion: what is the special magic number for {w}?",
                      attachment.index(s) / len(attachment)) for w, n, s in zip(words, numbers, sentences)]
    return Haystack(attachment, needles, code_share)
