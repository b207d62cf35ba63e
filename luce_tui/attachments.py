"""Attachments: text files (or big pastes) that go into the next user message as separate parts.

Only text is accepted: a file with NUL bytes or invalid UTF-8 is refused with a message saying
so. Token counts use the model's own tokenizer (run it in a worker: a large file takes a while).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

MAX_BYTES = 64 * 2**20          # beyond any context we can hold; refuse before reading it all
CTX_ROUND = 256                 # the engine rounds n_ctx up to a multiple of this


class AttachmentError(ValueError):
    """A file that cannot be attached (the message names it and says why)."""


@dataclasses.dataclass
class Attachment:
    name: str
    text: str
    n_tokens: int
    sha256: str | None = None   # set once the session store has it
    compress: bool | None = None   # PFlash: None = the policy decides, True/False = the user's choice

    @property
    def part(self) -> dict:
        """The message part the prompt is rendered from (conversation.render_content)."""
        part = {"name": self.name, "text": self.text}
        if self.compress is not None:   # read by Conversation.compress_attachments
            part["compress"] = self.compress
        return part

    def chip(self, will_compress: bool | None = None) -> str:
        """'notes.txt · 1,234 tok', plus the PFlash choice when a compressor is loaded
        (will_compress not None): 'auto: full', 'auto: compress', or the forced 'compress' / 'full'."""
        label = f"{self.name} · {self.n_tokens:,} tok"
        if will_compress is None:
            return label
        mode = "compress" if will_compress else "full"
        return f"{label} · {mode if self.compress is not None else 'auto: ' + mode}"


COMPRESS_MODES = {"auto": None, "on": True, "compress": True, "off": False, "full": False}   # /compress words


def compress_plan(pending: list[Attachment], compressor) -> list[bool]:
    """Whether each pending attachment will be compressed when sent: its own choice, else the
    compressor's policy on their total (as Conversation.compress_attachments decides it)."""
    if compressor is None:
        return [False] * len(pending)
    total = sum(a.n_tokens for a in pending)
    return [compressor.applies(total, a.compress) for a in pending]


def decode_text(name: str, data: bytes) -> str:
    if b"\x00" in data[:65536]:
        raise AttachmentError(f"{name} looks like a binary file (it contains NUL bytes); only text files "
                              "can be attached")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise AttachmentError(f"{name} is not UTF-8 text (bad byte at offset {e.start}); only text files "
                              "can be attached") from None
    return text.replace("\r\n", "\n")


def unique_names(paths: list[str], taken: list[str] = ()) -> list[str]:
    """Names for the files at paths: the base name, or where two would look the same (two
    README.md) the shortest tail of the path that tells them apart ("docs/README.md")."""
    parts = [Path(p).expanduser().resolve().parts for p in paths]
    names = []
    for i, ps in enumerate(parts):
        others = [q for j, q in enumerate(parts) if j != i]
        for k in range(1, len(ps) + 1):
            name = "/".join(ps[-k:])
            if name not in taken and all("/".join(q[-k:]) != name for q in others):
                break
        names.append(name)
    return names


def read(path: str | Path, tokenizer, name: str | None = None) -> Attachment:
    """Read and count one file (blocking: call it from a worker); name: how it is shown (default:
    its base name)."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise AttachmentError(f"{path} is a directory; attach the files in it one by one")
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise AttachmentError(f"{p.name} is {size / 2**20:.0f} MiB; attachments are limited to "
                                  f"{MAX_BYTES // 2**20} MiB of text")
        data = p.read_bytes()
    except FileNotFoundError:
        raise AttachmentError(f"{path}: no such file") from None
    except OSError as e:
        raise AttachmentError(f"{path}: {e.strerror or e}") from None
    name = name or p.name
    return from_text(name, decode_text(name, data), tokenizer)


def from_text(name: str, text: str, tokenizer) -> Attachment:
    """tokenizer None (a model on a server, --remote): the size is estimated at 4 bytes a token."""
    if tokenizer is None:
        return Attachment(name, text, len(text.encode("utf-8")) // 4 + 1)
    return Attachment(name, text, len(tokenizer.encode(text, add_special=False, parse_special=False)))


def round_ctx(n: int) -> int:
    return -(-n // CTX_ROUND) * CTX_ROUND


def budget_error(prompt_tokens: int, n_ctx: int, reserve: int, n_ctx_train: int = 0, *, has_history: bool = True,
                 has_attachments: bool = True, compressor: bool = False) -> str | None:
    """None when the prompt plus `reserve` tokens of reply fit the context; else what to do, for
    this situation: /new only with history to drop, /detach and PFlash only with files attached."""
    need = prompt_tokens + reserve
    if need <= n_ctx:
        return None
    advice = [f"restart with --max-ctx {round_ctx(need)}"]
    if n_ctx_train and round_ctx(need) > n_ctx_train:
        advice = [f"the model was trained for {n_ctx_train:,} tokens, so a larger --max-ctx will not help"]
    if has_attachments:
        advice.append("/compress on to send the files compressed (PFlash)" if compressor
                      else "restart with --pflash-scorer PATH to compress long files (PFlash)")
        advice.append("/detach a file")
    if has_history:
        advice.append("/new to start without the history")
    return (f"this message does not fit the context: the prompt is {prompt_tokens:,} tokens plus room for "
            f"{reserve:,} of reply, but the context holds {n_ctx:,}; " + ", or ".join(advice))
