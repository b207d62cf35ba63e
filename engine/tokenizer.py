"""Tokenizer built from a GGUF file's own metadata, giving exactly llama.cpp's token ids.

Only the ``tokenizer.*`` keys are read, straight from the file's key/value section (the
vocabulary of Qwen3.5 has 248k strings, so ``gguf.GGUFReader``, which turns every array
element into its own numpy view and also walks all tensor infos, is far too slow here: 1.7 s
for SmolLM2 against ~0.03 s).  The byte-level BPE itself runs in HF ``tokenizers`` (a BPE
model with the file's vocabulary and merges, the ``Split`` regexes llama.cpp uses for
``tokenizer.ggml.pre`` and a ``ByteLevel`` byte mapping).  Everything llama.cpp does around
the BPE is mirrored here in Python so the ids match token for token:

* special tokens are cut out of the text first, longest text first over the whole text
  (``tokenizer_st_partition``); CONTROL/UNKNOWN ones only when ``parse_special``,
  USER_DEFINED ones always;
* no Unicode normalization, no prefix space, no ``clean_spaces`` pass (llama.cpp turns it
  off for every supported pre-tokenizer);
* token attributes are overridden by text the way ``llama_vocab::impl::load`` does
  (``<|im_end|>`` and friends become CONTROL), the EOG set is auto-detected the same way;
* pieces are decoded like ``llama_token_to_piece``.

Needs numpy, ``gguf`` (constants only) and ``tokenizers``; ``transformers`` only for the
optional :attr:`Tokenizer.hf_tokenizer` wrapper (not a dependency of luce-chat: it comes with the
``test`` extra).  Never torch, never the network.
"""
from __future__ import annotations

import codecs
import mmap
import struct
from functools import cached_property
from os import PathLike
from typing import Any, Iterable

import numpy as np
from gguf import GGUF_MAGIC, GGUFValueType
from tokenizers import Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as _HFTokenizer

__all__ = ["TokenizerError", "Tokenizer", "StreamDecoder", "read_tokenizer_metadata"]


class TokenizerError(ValueError):
    """A GGUF's tokenizer metadata is missing, malformed or of an unsupported kind."""


# --------------------------------------------------------------------------------------
# GGUF metadata
# --------------------------------------------------------------------------------------

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_SCALARS = {  # GGUF value type -> (struct format, numpy dtype)
    GGUFValueType.UINT8: ("<B", "<u1"), GGUFValueType.INT8: ("<b", "<i1"),
    GGUFValueType.UINT16: ("<H", "<u2"), GGUFValueType.INT16: ("<h", "<i2"),
    GGUFValueType.UINT32: ("<I", "<u4"), GGUFValueType.INT32: ("<i", "<i4"),
    GGUFValueType.FLOAT32: ("<f", "<f4"), GGUFValueType.BOOL: ("<?", "<u1"),
    GGUFValueType.UINT64: ("<Q", "<u8"), GGUFValueType.INT64: ("<q", "<i8"),
    GGUFValueType.FLOAT64: ("<d", "<f8"),
}
_WANTED_GENERAL = ("general.architecture", "general.name")


class _Cursor:
    """Sequential little-endian reader over the mapped file, with bounds checks."""

    def __init__(self, buf: mmap.mmap, path: str):
        self.buf, self.off, self.size, self.path = buf, 0, len(buf), path

    def fail(self, what: str) -> TokenizerError:
        return TokenizerError(f"{self.path}: {what}")

    def take(self, n: int) -> int:
        start = self.off
        if n < 0 or start + n > self.size:
            raise self.fail(f"GGUF metadata truncated at byte {start}")
        self.off = start + n
        return start

    def u32(self) -> int:
        return _U32.unpack_from(self.buf, self.take(4))[0]

    def u64(self) -> int:
        return _U64.unpack_from(self.buf, self.take(8))[0]

    def raw_str(self) -> bytes:
        n = self.u64()
        start = self.take(n)
        return self.buf[start:start + n]

    def string(self, key: str) -> str:
        try:
            return self.raw_str().decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{key}: string is not valid UTF-8") from None

    def str_array(self, n: int, key: str, keep: bool) -> list[str] | None:
        # The hot loop for 248k-entry vocabularies: locals only, no method calls per item.
        buf, off, size, unpack = self.buf, self.off, self.size, _U64.unpack_from
        out: list[Any] = [None] * n if keep else []
        try:
            for i in range(n):
                (ln,) = unpack(buf, off)
                off += 8
                if off + ln > size:
                    raise struct.error
                if keep:
                    out[i] = buf[off:off + ln].decode("utf-8")
                off += ln
        except struct.error:
            raise self.fail(f"GGUF metadata truncated in {key}") from None
        except UnicodeDecodeError:
            raise self.fail(f"{key}[{i}]: string is not valid UTF-8") from None
        self.off = off
        return out if keep else None

    def value(self, vtype: int, key: str, keep: bool) -> Any:
        if vtype == GGUFValueType.STRING:
            return self.string(key) if keep else self.raw_str()
        if vtype == GGUFValueType.ARRAY:
            itype, n = self.u32(), self.u64()
            if itype == GGUFValueType.STRING:
                return self.str_array(n, key, keep)
            if itype not in _SCALARS:
                raise self.fail(f"{key}: unsupported GGUF array element type {itype}")
            dtype = np.dtype(_SCALARS[itype][1])
            start = self.take(n * dtype.itemsize)
            if not keep:
                return None
            arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=start).copy()
            return arr.astype(bool) if itype == GGUFValueType.BOOL else arr
        if vtype not in _SCALARS:
            raise self.fail(f"{key}: unsupported GGUF value type {vtype}")
        fmt = _SCALARS[vtype][0]
        start = self.take(struct.calcsize(fmt))
        return struct.unpack_from(fmt, self.buf, start)[0]


def read_tokenizer_metadata(path: str | PathLike[str]) -> dict[str, Any]:
    """Return the ``tokenizer.*`` keys (plus ``general.architecture``/``general.name``) of a GGUF.

    Strings come back as ``str``, string arrays as ``list[str]``, numeric arrays as numpy
    arrays, scalars as Python numbers/bools.  Other keys are skipped without decoding them.
    Raises :class:`TokenizerError` for anything that is not a readable GGUF v2/v3 file.
    """
    path = str(path)
    try:
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: mmap of an empty file
        raise TokenizerError(f"{path}: cannot read GGUF file: {e}") from None
    try:
        cur = _Cursor(buf, path)
        if len(buf) < 24 or _U32.unpack_from(buf, 0)[0] != GGUF_MAGIC:
            raise cur.fail("not a GGUF file (bad magic)")
        cur.off = 4
        version = cur.u32()
        if version not in (2, 3):
            raise cur.fail(f"unsupported GGUF version {version} (only little-endian v2/v3)")
        cur.u64()  # tensor count: the tensor infos come after the metadata, never read
        n_kv = cur.u64()
        out: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cur.string("key")
            vtype = cur.u32()
            keep = key.startswith("tokenizer.") or key in _WANTED_GENERAL
            value = cur.value(vtype, key, keep)
            if keep:
                out[key] = value
        return out
    finally:
        buf.close()


# --------------------------------------------------------------------------------------
# llama.cpp vocabulary semantics
# --------------------------------------------------------------------------------------

# llama_token_attr bits (llama.h).  GGUF stores token *types*; llama.cpp maps them to these
# attributes and then ORs in overrides, so we keep the same representation.
A_UNDEFINED, A_UNKNOWN, A_UNUSED, A_NORMAL = 0, 1 << 0, 1 << 1, 1 << 2
A_CONTROL, A_USER_DEFINED, A_BYTE = 1 << 3, 1 << 4, 1 << 5
# index = GGUF token type (0 undefined, 1 normal, 2 unknown, 3 control, 4 user, 5 unused, 6 byte)
_TYPE_TO_ATTR = np.array([A_UNDEFINED, A_NORMAL, A_UNKNOWN, A_CONTROL, A_USER_DEFINED,
                          A_UNUSED, A_BYTE], dtype=np.int32)

# The pre-tokenizer regexes of llama.cpp's llm_tokenizer_bpe, verbatim.  llama.cpp spells the
# case-insensitive contractions out; Oniguruma's (?i:'s) would also match "'ſ" (U+017F).
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Pre-tokenizers whose llama.cpp settings are exactly "these splits, clean_spaces off, no
# ignore_merges"; others (llama3: ignore_merges, gpt-2: clean_spaces) are deliberately refused.
_PRE_SPLITS: dict[str, tuple[str, ...]] = {
    "smollm": (r"\p{N}", _GPT2),  # digits isolated first, then GPT-2 on each piece
    "qwen2": (_QWEN2,), "deepseek-r1-qwen": (_QWEN2,), "kormo": (_QWEN2,), "f2llmv2": (_QWEN2,),
    "qwen35": (_QWEN35,),
}

# Special-token ids: (name, GGUF key suffix).  Later keys win (deprecated FIM aliases last,
# as in llama.cpp).
_ID_KEYS = (
    ("bos", "bos_token_id"), ("eos", "eos_token_id"), ("eot", "eot_token_id"),
    ("eom", "eom_token_id"), ("unk", "unknown_token_id"), ("sep", "seperator_token_id"),
    ("pad", "padding_token_id"), ("mask", "mask_token_id"),
    ("fim_pre", "fim_pre_token_id"), ("fim_suf", "fim_suf_token_id"),
    ("fim_mid", "fim_mid_token_id"), ("fim_pad", "fim_pad_token_id"),
    ("fim_rep", "fim_rep_token_id"), ("fim_sep", "fim_sep_token_id"),
    ("fim_pre", "prefix_token_id"), ("fim_suf", "suffix_token_id"), ("fim_mid", "middle_token_id"),
)
# Texts llama.cpp uses to find ids the file does not name (llama_vocab::impl::load).
_AUTO_TEXTS = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
            "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
            "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
_EOG_TEXTS = frozenset((
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
))


def _byte_decoder() -> dict[int, int]:
    """GPT-2's byte <-> printable-unicode table, reversed: ord(char) -> byte."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {b: b for b in keep}, 0
    for b in range(256):
        if b not in table:
            table[b] = 256 + extra
            extra += 1
    return {cp: b for b, cp in table.items()}


_UNBYTE = _byte_decoder()


class Tokenizer:
    """A GGUF vocabulary: ``encode``/``decode`` with llama.cpp's exact semantics.

    Build it with :meth:`from_gguf` (or ``Tokenizer(read_tokenizer_metadata(path), path)``).
    ``encode(text, add_special, parse_special)`` behaves
    like ``llama_tokenize``; ``decode``/``token_to_piece`` like ``llama_detokenize`` /
    ``llama_token_to_piece`` (``skip_special`` = not ``unparse_special``).  Supported:
    ``tokenizer.ggml.model`` = ``gpt2`` with ``tokenizer.ggml.pre`` in ``smollm``, ``qwen2``
    (and its aliases ``deepseek-r1-qwen``, ``kormo``, ``f2llmv2``) or ``qwen35``.
    """

    def __init__(self, meta: dict[str, Any], source: str = "<metadata>"):
        self.source = source

        def need(key: str) -> Any:
            if key not in meta:
                raise TokenizerError(f"{source}: missing {key}")
            return meta[key]

        model = need("tokenizer.ggml.model")
        if model != "gpt2":
            raise TokenizerError(f"{source}: unsupported tokenizer.ggml.model {model!r} "
                                 "(supported: 'gpt2' byte-level BPE)")
        pre = meta.get("tokenizer.ggml.pre", "")
        if pre not in _PRE_SPLITS:
            raise TokenizerError(f"{source}: unsupported tokenizer.ggml.pre {pre!r} "
                                 f"(supported: {', '.join(sorted(_PRE_SPLITS))})")
        self.model, self.pre = model, pre

        tokens = need("tokenizer.ggml.tokens")
        merges = need("tokenizer.ggml.merges")
        if not isinstance(tokens, list) or not isinstance(merges, list):
            raise TokenizerError(f"{source}: tokenizer.ggml.tokens/merges must be string arrays")
        n = len(tokens)
        if n == 0:
            raise TokenizerError(f"{source}: empty vocabulary")
        vocab = {t: i for i, t in enumerate(tokens)}
        if "" in vocab:  # llama.cpp renames empty tokens instead of failing
            tokens = [t or f"[EMPTY_{i}]" for i, t in enumerate(tokens)]
            vocab = {t: i for i, t in enumerate(tokens)}
        if len(vocab) != n:  # llama.cpp refuses these too
            dup = next(t for i, t in enumerate(tokens) if vocab[t] != i)
            raise TokenizerError(f"{source}: duplicate token in vocabulary: {dup!r}")
        self._tokens, self._vocab = tokens, vocab

        types = meta.get("tokenizer.ggml.token_type")
        if types is None:
            attrs = np.full(n, A_NORMAL, dtype=np.int32)
        else:
            types = np.asarray(types, dtype=np.int64).ravel()
            if types.size < n:
                raise TokenizerError(f"{source}: tokenizer.ggml.token_type has {types.size} "
                                     f"entries for {n} tokens")
            types = types[:n]
            in_range = (types >= 0) & (types < len(_TYPE_TO_ATTR))
            attrs = np.where(in_range, _TYPE_TO_ATTR[np.clip(types, 0, 6)], A_UNDEFINED)
        self._attrs = attrs.astype(np.int32)
        self._ids = self._special_ids(meta)
        self.add_bos = bool(meta.get("tokenizer.ggml.add_bos_token", False))
        self.add_eos = bool(meta.get("tokenizer.ggml.add_eos_token", False))
        for flag, name in ((self.add_bos, "bos"), (self.add_eos, "eos")):
            if flag and self._ids[name] is None:
                raise TokenizerError(f"{source}: tokenizer.ggml.add_{name}_token is true "
                                     f"but there is no {name} token")
        template = meta.get("tokenizer.chat_template")
        self.chat_template: str | None = template if isinstance(template, str) else None

        # Specials are cut out longest-first; ties keep id order (llama.cpp's sort is unstable).
        special = np.flatnonzero(self._attrs & (A_CONTROL | A_USER_DEFINED | A_UNKNOWN))
        ordered = sorted(special.tolist(), key=lambda i: -len(tokens[i].encode()))
        self._specials_all = [(tokens[i], i) for i in ordered]
        self._specials_user = [(t, i) for t, i in self._specials_all
                               if not self._attrs[i] & (A_CONTROL | A_UNKNOWN)]
        self._pieces: list[bytes | None] = [None] * n
        self._bpe = self._build_bpe(merges)

    @classmethod
    def from_gguf(cls, path: str | PathLike[str]) -> "Tokenizer":
        """Read the vocabulary of a GGUF file (only its metadata) and build the tokenizer."""
        return cls(read_tokenizer_metadata(path), source=str(path))

    # -- construction helpers ----------------------------------------------------------

    def _special_ids(self, meta: dict[str, Any]) -> dict[str, int | None]:
        """Mirror llama.cpp: defaults, GGUF keys, text auto-detection, attribute overrides, EOG."""
        n, vocab, attrs = len(self._tokens), self._vocab, self._attrs
        ids: dict[str, int | None] = {name: None for name, _ in _ID_KEYS}
        ids["bos"] = ids["eos"] = 11 if n > 11 else None  # llama.cpp's BPE defaults
        for name, suffix in _ID_KEYS:
            value = meta.get("tokenizer.ggml." + suffix)
            if value is not None and 0 <= int(value) < n:
                ids[name] = int(value)

        for name, texts in _AUTO_TEXTS.items():
            if ids[name] is None:
                found = [vocab[t] for t in texts if t in vocab]
                if found:  # llama.cpp takes hash-map order; the smallest id is deterministic
                    ids[name] = min(found)
                    attrs[ids[name]] |= A_CONTROL

        eog = {ids[k] for k in ("fim_pad", "fim_rep", "fim_sep") if ids[k] is not None}
        for text in _EOG_TEXTS:
            tid = vocab.get(text)
            if tid is not None:
                eog.add(tid)
                attrs[tid] |= A_CONTROL
        for text in ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"):  # gpt-oss
            if text in vocab:
                attrs[vocab[text]] = A_USER_DEFINED
        eog |= {ids[k] for k in ("eos", "eot", "eom") if ids[k] is not None}
        texts = {self._tokens[i]: i for i in eog}
        # o200k_harmony / solar-open: "<|end|>" ends a message, not the generation
        if "<|end|>" in texts and (
                ("<|return|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts))
                or ("<|flush|>" in texts and ("<|call|>" in texts or "<|calls|>" in texts))):
            eog.discard(texts["<|end|>"])
            attrs[texts["<|end|>"]] = A_USER_DEFINED
        if "<|tool_response>" in texts and "</s>" in texts:  # gemma4 / paddleocr
            eog.discard(texts["</s>"])
            attrs[texts["</s>"]] = A_NORMAL
        self._eog = frozenset(eog)
        return ids

    def _build_bpe(self, merges: list[str]) -> _HFTokenizer:
        pairs, seen = [], set()
        for m in merges:
            i = m.find(" ", 1)
            if i < 0 or m in seen:  # llama.cpp keeps the first rank of a repeated merge
                continue
            seen.add(m)
            pairs.append((m[:i], m[i + 1:]))
        try:
            bpe = models.BPE(vocab=self._vocab, merges=pairs)
        except Exception:
            # HF insists that a merge's parts and result are all tokens.  Only a broken
            # conversion has other merges (llama.cpp would apply them and fall back to byte
            # tokens where the result is no token); drop them rather than fail.
            v = self._vocab
            pairs = [(a, b) for a, b in pairs if a in v and b in v and a + b in v]
            bpe = models.BPE(vocab=v, merges=pairs)
        tok = _HFTokenizer(bpe)
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(rx), behavior="isolated") for rx in _PRE_SPLITS[self.pre]]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()
        return tok

    # -- properties --------------------------------------------------------------------

    @property
    def n_vocab(self) -> int:
        return len(self._tokens)

    @property
    def bos_id(self) -> int | None:
        return self._ids["bos"]

    @property
    def eos_id(self) -> int | None:
        return self._ids["eos"]

    @property
    def eot_id(self) -> int | None:
        return self._ids["eot"]

    @property
    def pad_id(self) -> int | None:
        return self._ids["pad"]

    @property
    def eog_ids(self) -> frozenset[int]:
        """Ids that end generation, as llama.cpp's ``llama_vocab_is_eog`` decides them."""
        return self._eog

    @property
    def bos_token(self) -> str:
        return "" if self.bos_id is None else self._tokens[self.bos_id]

    @property
    def eos_token(self) -> str:
        return "" if self.eos_id is None else self._tokens[self.eos_id]

    def is_eog(self, token_id: int) -> bool:
        return token_id in self._eog

    def token_attr(self, token_id: int) -> int:
        """llama.cpp's ``llama_token_attr`` bits of a token (after its text-based overrides)."""
        return int(self._attrs[token_id])

    def is_control(self, token_id: int) -> bool:
        """True for tokens llama.cpp hides when decoding without special tokens."""
        return bool(self._attrs[token_id] & (A_CONTROL | A_UNKNOWN))

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry as stored (byte-level spelling for normal tokens)."""
        return self._tokens[token_id]

    def token_id(self, text: str) -> int | None:
        """Id of a vocabulary entry (stored spelling), or None."""
        return self._vocab.get(text)

    # -- encode ------------------------------------------------------------------------

    def _partition(self, text: str, parse_special: bool) -> list[str | int]:
        """Cut special tokens out of the text like llama.cpp's ``tokenizer_st_partition``."""
        frags: list[str | int] = [text]
        for tok_text, tid in (self._specials_all if parse_special else self._specials_user):
            if not any(type(f) is str and tok_text in f for f in frags):
                continue
            out: list[str | int] = []
            for f in frags:
                if type(f) is not str or tok_text not in f:
                    out.append(f)
                    continue
                for j, part in enumerate(f.split(tok_text)):
                    if j:
                        out.append(tid)
                    if part:
                        out.append(part)
            frags = out
        return frags

    def encode(self, text: str, *, add_special: bool = False,
               parse_special: bool = True) -> list[int]:
        """Token ids of ``text``, exactly as ``llama_tokenize(text, add_special, parse_special)``.

        ``add_special`` prepends BOS / appends EOS only where the GGUF asks for them
        (``add_bos_token`` / ``add_eos_token``).  With ``parse_special`` control tokens written
        in the text (``<|im_start|>``) become their ids; without it they are plain text.
        User-defined tokens (``<think>``) are always matched whole, as in llama.cpp.
        """
        if not isinstance(text, str):
            raise TypeError(f"encode() takes str, not {type(text).__name__}")
        return self.encode_parts([(text, parse_special)], add_special=add_special)

    def encode_parts(self, parts: Iterable[tuple[str, bool]], *, add_special: bool = False) -> list[int]:
        """Token ids of the concatenated texts of ``parts``, each ``(text, parse_special)``.

        For a rendered chat prompt: the template's markup may write control tokens, the
        messages' text must not (an attachment holding ``<|im_end|>`` stays text).  Special
        tokens are cut out of each part on its own; the plain text between them is BPE-tokenized
        across part boundaries, so when the plain parts hold no control-token text the ids
        equal ``encode("".join(texts), parse_special=True)``.
        """
        frags: list[str | int] = []
        for text, parse_special in parts:
            if not isinstance(text, str):
                raise TypeError(f"encode() takes str, not {type(text).__name__}")
            for f in self._partition(text, parse_special) if text else ():
                if type(f) is str and frags and type(frags[-1]) is str:
                    frags[-1] += f   # type: ignore[operator]
                else:
                    frags.append(f)
        ids: list[int] = []
        if add_special and self.add_bos:
            ids.append(self._ids["bos"])  # type: ignore[arg-type]
        # One plain encode per fragment: the batch API would start tokenizers' thread pool,
        # which then warns in every child process the application forks.
        bpe = self._bpe.encode
        try:
            for f in frags:
                if type(f) is str:
                    ids.extend(bpe(f, add_special_tokens=False).ids)
                else:
                    ids.append(f)  # type: ignore[arg-type]
        except Exception as e:  # e.g. lone surrogates, which have no UTF-8 form
            raise TokenizerError(f"cannot tokenize text: {e}") from None
        if add_special and self.add_eos:
            ids.append(self._ids["eos"])  # type: ignore[arg-type]
        return ids

    def has_control_text(self, text: str) -> bool:
        """Whether ``parse_special`` would turn part of ``text`` into a control token."""
        return any(t in text for t, i in self._specials_all if self._attrs[i] & (A_CONTROL | A_UNKNOWN))

    # -- decode ------------------------------------------------------------------------

    def _piece(self, tid: int) -> bytes:
        piece = self._pieces[tid]
        if piece is None:
            text, attr = self._tokens[tid], int(self._attrs[tid])
            if attr & (A_CONTROL | A_UNKNOWN | A_USER_DEFINED):
                piece = text.encode()
            elif attr & A_NORMAL:
                piece = self._unbyte(text)
            elif attr & A_BYTE:  # "<0xAB>"
                try:
                    piece = bytes([int(text[3:5], 16)])
                except ValueError:
                    piece = b""
            else:  # UNUSED / UNDEFINED render as nothing
                piece = b""
            self._pieces[tid] = piece
        return piece

    @staticmethod
    def _unbyte(text: str) -> bytes:
        """Byte-level spelling -> bytes (llama.cpp's ``llama_decode_text``)."""
        try:
            return bytes(_UNBYTE[ord(c)] for c in text)
        except KeyError:  # not byte-level: llama.cpp writes a marker, so do we
            out = bytearray()
            for c in text:
                b = _UNBYTE.get(ord(c))
                if b is None:
                    out += b"[UNK_BYTE_0x" + c.encode().hex().encode() + text.encode() + b"]"
                else:
                    out.append(b)
            return bytes(out)

    def token_to_piece(self, token_id: int, *, special: bool = True) -> bytes:
        """Bytes of one token as ``llama_token_to_piece``; may be part of a UTF-8 character.

        Control (and unknown) tokens give their text when ``special``, else nothing.
        """
        if not 0 <= token_id < len(self._tokens):
            raise TokenizerError(f"token id {token_id} out of range (n_vocab {self.n_vocab})")
        if not special and self._attrs[token_id] & (A_CONTROL | A_UNKNOWN):
            return b""
        return self._piece(token_id)

    def decode_bytes(self, ids: Iterable[int], *, skip_special: bool = False) -> bytes:
        """Concatenated token bytes, as ``llama_detokenize(remove_special=False)``."""
        special = not skip_special
        return b"".join(self.token_to_piece(int(i), special=special) for i in ids)

    def decode(self, ids: Iterable[int], *, skip_special: bool = False) -> str:
        """Text of ``ids``; invalid UTF-8 (e.g. a cut-off character) becomes U+FFFD."""
        return self.decode_bytes(ids, skip_special=skip_special).decode("utf-8", "replace")

    def stream_decoder(self, *, skip_special: bool = False) -> "StreamDecoder":
        return StreamDecoder(self, skip_special=skip_special)

    # -- transformers wrapper ----------------------------------------------------------

    @cached_property
    def hf_tokenizer(self):
        """The same vocabulary as a ``transformers.PreTrainedTokenizerFast`` (built on first use).

        Handy for transformers APIs; its ``encode`` matches ours for ordinary text, but only
        :meth:`encode` reproduces llama.cpp's special-token cutting in every corner case
        (HF matches added tokens leftmost-longest, llama.cpp longest-first).
        """
        from tokenizers import AddedToken
        from transformers import PreTrainedTokenizerFast

        backend = _HFTokenizer.from_str(self._bpe.to_str())
        backend.add_special_tokens([AddedToken(t, normalized=False, special=True)
                                    for t, i in self._specials_all
                                    if self._attrs[i] & (A_CONTROL | A_UNKNOWN)])
        backend.add_tokens([AddedToken(t, normalized=False, special=False)
                            for t, _ in self._specials_user])
        names = {f"{k}_token": self._tokens[self._ids[k]]  # type: ignore[index]
                 for k in ("bos", "eos", "unk", "pad") if self._ids[k] is not None}
        return PreTrainedTokenizerFast(tokenizer_object=backend, chat_template=self.chat_template,
                                       clean_up_tokenization_spaces=False, **names)

    def __repr__(self) -> str:
        return (f"Tokenizer({self.source!r}, pre={self.pre!r}, n_vocab={self.n_vocab}, "
                f"bos={self.bos_id}, eos={self.eos_id}, eog={sorted(self._eog)})")


class StreamDecoder:
    """Turns a stream of token ids into text increments.

    A UTF-8 character split over several tokens is held back until it is complete, so no
    increment ever contains a U+FFFD for a character that is still arriving; bytes that can
    never become valid UTF-8 are replaced by U+FFFD exactly as :meth:`Tokenizer.decode` does.
    The concatenation of all increments plus :meth:`flush` equals ``decode(all_ids)``.
    """

    def __init__(self, tokenizer: Tokenizer, *, skip_special: bool = False):
        self._tok = tokenizer
        self._special = not skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, token_id: int) -> str:
        """Feed one id; returns the text that became complete (often "")."""
        return self._utf8.decode(self._tok.token_to_piece(token_id, special=self._special))

    def feed(self, ids: Iterable[int]) -> str:
        return "".join(self.push(i) for i in ids)

    def flush(self) -> str:
        """End of stream: returns any held-back incomplete bytes (as U+FFFD) and resets."""
        out = self._utf8.decode(b"", final=True)
        self._utf8.reset()
        return out
