// state_file.h — an engine's context in a file (luce_engine_state_save / _load in luce.h).
//
// Layout (host byte order, little-endian on every platform luce runs on):
//   [0, 4096)   header: the identity block (magic, format version, the model's GGUF size and
//               metadata checksum, shape, cache types, context size; its own checksum) at 0, and
//               two commit records at 1024 and 2048. A record says where the current index and
//               blob are, with their sizes and checksums, and ends with its own checksum; the valid
//               record with the higher sequence number is the state. An append writes everything
//               new past the end of the live data, syncs, then writes the other record and syncs
//               again: a crash at any point leaves one valid record, the old or the new.
//   segments    K and V rows of the attention layers for a token range [first, first + count):
//               per attention layer, K rows then V rows, as the cache stores them. A full save
//               writes one segment; each append adds one for the new tokens.
//   blob        the state after the last token: recurrent conv + DeltaNet state per layer, the
//               logits row after the last token, the capture rows of the last positions.
//   index       token ids, the segment table (offset, range, size, checksum each), and what the
//               blob holds. Read whole and checked before anything in the engine changes.
// Blobs and indexes superseded by an append stay in the file as dead bytes until a save finds
// them larger than half of the live data and rewrites the file (beside it, then renamed over it).
#pragma once

#include "luce.h"

#include <cstdint>
#include <string>
#include <vector>

namespace luce {

class Engine;

constexpr uint32_t kStateFormatVersion = 1;

uint64_t engine_state_bytes(Engine & e);
luce_state_io save_engine_state(Engine & e, const std::string & path, bool allow_append);
luce_state_io load_engine_state(Engine & e, const std::string & path);
luce_state_info read_state_info(const std::string & path);
std::vector<int32_t> read_state_tokens(const std::string & path);

} // namespace luce
