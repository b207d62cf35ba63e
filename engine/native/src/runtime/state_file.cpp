// state_file.cpp — see state_file.h.
#include "state_file.h"
#include "state_checksum.h"
#include "state_load.h"
#include "state_stream.h"

#include "attention_kv.h"
#include "engine.h"
#include "error.h"
#include "gguf_file.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <optional>

namespace luce {
namespace {

constexpr char kMagic[8] = {'L', 'U', 'C', 'E', 'S', 'T', 'A', 'T'};
constexpr uint64_t kHeaderBytes = 4096;
constexpr uint64_t kRecordAt[2] = {1024, 2048};
constexpr uint32_t kIndexMagic = 0x5844494cu;   // "LIDX"

struct Identity {
    char magic[8];
    uint32_t version;
    uint32_t version_check;   // ~version: a damaged version is told from a newer one (every format keeps these 16 bytes)
    uint64_t model_file_size;
    uint64_t model_hash;
    char arch[32];
    int32_t n_layer, n_embd, n_vocab, n_head_kv, head_dim, n_ctx;
    int32_t type_k, type_v, kv_rotation, reserved[7];
    uint64_t checksum;   // of the bytes before it
};

struct Record {
    uint64_t seq;   // 0: never written
    uint64_t n_tokens;
    uint64_t index_offset, index_bytes, index_checksum;
    uint64_t blob_offset, blob_bytes, blob_checksum;
    uint64_t end;          // end of the data this record uses: an append starts here
    uint64_t dead_bytes;   // superseded blobs and indexes before end
    uint64_t checksum;     // of the fields before it
};

struct Segment {
    uint64_t offset, first, count, bytes, checksum;
};

struct Index {
    std::vector<int32_t> tokens;
    std::vector<Segment> segments;
    int32_t logits_argmax = -1;
    uint32_t logits_values = 0;   // the row's values are in the blob
    uint32_t cap_output = 0;
    int32_t cap_ring = 0;
    uint64_t cap_first = 0, cap_rows = 0;
    std::vector<int32_t> cap_layers;
    uint64_t recurrent_bytes = 0;
};

template <class T> void put(std::vector<uint8_t> & out, const T & v) {
    const auto * p = reinterpret_cast<const uint8_t *>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
template <class T> void put_all(std::vector<uint8_t> & out, const std::vector<T> & v) {
    const auto * p = reinterpret_cast<const uint8_t *>(v.data());
    out.insert(out.end(), p, p + v.size() * sizeof(T));
}

std::vector<uint8_t> serialize(const Index & ix) {
    std::vector<uint8_t> out;
    put(out, kIndexMagic);
    put(out, uint32_t(ix.segments.size()));
    put(out, uint64_t(ix.tokens.size()));
    put_all(out, ix.tokens);
    put_all(out, ix.segments);
    put(out, ix.logits_argmax);
    put(out, ix.logits_values);
    put(out, ix.cap_output);
    put(out, ix.cap_ring);
    put(out, ix.cap_first);
    put(out, ix.cap_rows);
    put(out, uint32_t(ix.cap_layers.size()));
    put_all(out, ix.cap_layers);
    put(out, ix.recurrent_bytes);
    return out;
}

class Cursor {
public:
    Cursor(const std::vector<uint8_t> & b, const std::string & path) : b_(b), path_(path) {}
    template <class T> T get() {
        T v;
        take(&v, sizeof(T));
        return v;
    }
    template <class T> void get_all(std::vector<T> & v, uint64_t n) {
        if (n > (b_.size() - at_) / sizeof(T)) damaged(path_, "its index lists more entries than it holds");
        v.resize(size_t(n));
        take(v.data(), size_t(n) * sizeof(T));
    }
    bool at_end() const { return at_ == b_.size(); }

private:
    void take(void * p, size_t n) {
        if (n > b_.size() - at_) damaged(path_, "its index ends early");
        std::memcpy(p, b_.data() + at_, n);
        at_ += n;
    }
    const std::vector<uint8_t> & b_;
    const std::string & path_;
    size_t at_ = 0;
};

Index parse_index(const std::vector<uint8_t> & b, const std::string & path) {
    Cursor c(b, path);
    if (c.get<uint32_t>() != kIndexMagic) damaged(path, "its index has the wrong magic");
    Index ix;
    const uint32_t n_seg = c.get<uint32_t>();
    const uint64_t n_tok = c.get<uint64_t>();
    c.get_all(ix.tokens, n_tok);
    c.get_all(ix.segments, n_seg);
    ix.logits_argmax = c.get<int32_t>();
    ix.logits_values = c.get<uint32_t>();
    ix.cap_output = c.get<uint32_t>();
    ix.cap_ring = c.get<int32_t>();
    ix.cap_first = c.get<uint64_t>();
    ix.cap_rows = c.get<uint64_t>();
    c.get_all(ix.cap_layers, c.get<uint32_t>());
    ix.recurrent_bytes = c.get<uint64_t>();
    if (!c.at_end()) damaged(path, "its index has trailing bytes");
    return ix;
}

uint64_t record_checksum(const Record & r) { return Checksum64::of(&r, offsetof(Record, checksum)); }
uint64_t identity_checksum(const Identity & id) { return Checksum64::of(&id, offsetof(Identity, checksum)); }

// The metadata and tensor table, plus samples of the tensor data: two files with the same keys and
// tensor layout (a fine-tune, a tiny test model of another seed) still differ here.
uint64_t model_hash(const GgufFile & f) {
    Checksum64 c;
    c.update(f.mapped_data(0), f.data_offset());
    constexpr size_t kSample = 4096, kSamples = 16;
    const size_t data = f.file_size() - f.data_offset();
    for (size_t i = 0; i < kSamples && data > 0; ++i) {
        const size_t at = f.data_offset() + (data > kSample ? (data - kSample) / (kSamples - 1) * i : 0);
        c.update(f.mapped_data(at), std::min(kSample, f.file_size() - at));
    }
    return c.digest();
}

Identity identity_of(Engine & e) {
    const Model & m = e.model();
    Identity id{};
    std::memcpy(id.magic, kMagic, sizeof kMagic);
    id.version = kStateFormatVersion;
    id.version_check = ~kStateFormatVersion;
    if (!m.file) throw Error(LUCE_ERR_STATE, "the model's file is not open: cannot identify it in a state file");
    id.model_file_size = m.file->file_size();
    id.model_hash = model_hash(*m.file);
    std::strncpy(id.arch, m.hp.arch.c_str(), sizeof id.arch - 1);
    id.n_layer = m.hp.n_layer;
    id.n_embd = m.hp.n_embd;
    id.n_vocab = m.hp.n_vocab;
    id.n_head_kv = m.hp.n_head_kv;
    id.head_dim = m.hp.head_dim;
    id.n_ctx = e.n_ctx();
    id.type_k = int32_t(e.params().type_k);
    id.type_v = int32_t(e.params().type_v);
    id.kv_rotation = e.params().kv_rotation ? 1 : 0;
    id.checksum = identity_checksum(id);
    return id;
}

// A state file opened for reading: its identity, current record and (optionally) index, checked.
struct Opened {
    File file;
    Identity id{};
    Record rec{};
    Index index;
};

Opened open_state(const std::string & path, bool writable, bool need_index) {
    Opened o{File(path, writable ? File::ReadWrite : File::Read), {}, {}, {}};
    const uint64_t size = o.file.size();
    if (size < sizeof(Identity)) damaged(path, "it is shorter than a state file's header (" + std::to_string(size) + " bytes)");
    o.file.read_exact(&o.id, sizeof o.id, 0);
    if (std::memcmp(o.id.magic, kMagic, sizeof kMagic) != 0) damaged(path, "it is not a luce state file (wrong magic)");
    if (o.id.version_check != ~o.id.version) damaged(path, "its format version is damaged");
    if (o.id.version > kStateFormatVersion) {
        throw Error(LUCE_ERR_STATE_NEWER, "state file " + path + " has format version " + std::to_string(o.id.version) +
                                              ", newer than this luce reads (" + std::to_string(kStateFormatVersion) +
                                              "): update luce-chat or let the chat prefill again");
    }
    if (o.id.version == 0 || o.id.checksum != identity_checksum(o.id)) damaged(path, "its header checksum does not match");
    if (size < kHeaderBytes) damaged(path, "it is truncated inside its header");
    Record r[2];
    int best = -1;
    for (int i = 0; i < 2; ++i) {
        o.file.read_exact(&r[i], sizeof(Record), kRecordAt[i]);
        if (r[i].seq == 0 || r[i].checksum != record_checksum(r[i])) continue;
        if (best < 0 || r[i].seq > r[best].seq) best = i;
    }
    if (best < 0) damaged(path, "it has no complete commit record (its first write was interrupted)");
    o.rec = r[best];
    if (o.rec.end > size) {
        damaged(path, "it is truncated: its state ends at byte " + std::to_string(o.rec.end) + " but the file has " +
                          std::to_string(size));
    }
    if (need_index) {
        if (o.rec.index_offset + o.rec.index_bytes > o.rec.end || o.rec.blob_offset + o.rec.blob_bytes > o.rec.end) {
            damaged(path, "its commit record points past its end");
        }
        std::vector<uint8_t> raw(size_t(o.rec.index_bytes));
        o.file.read_exact(raw.data(), raw.size(), o.rec.index_offset);
        if (Checksum64::of(raw.data(), raw.size()) != o.rec.index_checksum) damaged(path, "its index checksum does not match");
        o.index = parse_index(raw, path);
        if (o.index.tokens.size() != o.rec.n_tokens) damaged(path, "its index and commit record disagree on the token count");
        uint64_t next = 0;
        for (const Segment & s : o.index.segments) {
            if (s.first != next || s.offset + s.bytes > o.rec.end) damaged(path, "its segment table is inconsistent");
            next += s.count;
        }
        if (next != o.rec.n_tokens) damaged(path, "its segments do not cover its tokens");
    }
    return o;
}

// Bytes of K plus V of one token over all attention layers.
uint64_t kv_token_bytes(const AttentionKv & kv) {
    uint64_t b = 0;
    for (size_t il = 0; il < kv.k.size(); ++il) {
        if (kv.k[il]) b += kv.k[il]->nb[1] + kv.v[il]->nb[1];
    }
    return b;
}

uint64_t recurrent_bytes(const RecurrentState & rec) {
    uint64_t b = 0;
    for (size_t il = 0; il < rec.conv.size(); ++il) {
        if (rec.conv[il]) b += ggml_nbytes(rec.conv[il]) + ggml_nbytes(rec.ssm[il]);
    }
    return b;
}

// What the blob of the engine's current context holds (the index without tokens and segments).
Index blob_layout(Engine & e, int32_t logits_argmax, bool logits_values) {
    ContextState & kv = e.context_state();
    Index ix;
    ix.logits_argmax = logits_argmax;
    ix.logits_values = logits_values ? 1 : 0;
    ix.recurrent_bytes = recurrent_bytes(kv.rec);
    if (!kv.capture.layers.empty()) {
        ix.cap_output = kv.capture.output_convention ? 1 : 0;
        ix.cap_ring = kv.capture.ring;
        ix.cap_rows = uint64_t(std::min(e.n_past(), kv.capture.ring));
        ix.cap_first = uint64_t(e.n_past()) - ix.cap_rows;
        ix.cap_layers.assign(kv.capture.layers.begin(), kv.capture.layers.end());
    }
    return ix;
}

uint64_t blob_bytes(const Index & ix, int n_vocab, int n_embd) {
    return ix.recurrent_bytes + (ix.logits_values ? uint64_t(n_vocab) * 4 : 0) +
           ix.cap_layers.size() * ix.cap_rows * uint64_t(n_embd) * 4;
}

// Rows [first, first + n) of a capture ring as one or two contiguous pieces (the ring wraps).
template <class F> void ring_pieces(int ring, uint64_t first, uint64_t n, F && f) {
    while (n > 0) {
        const uint64_t row = first % uint64_t(ring);
        const uint64_t len = std::min<uint64_t>(n, uint64_t(ring) - row);
        f(row, len);
        first += len;
        n -= len;
    }
}

Segment write_segment(Engine & e, Writer & w, int32_t first, int32_t count) {
    const AttentionKv & kv = e.context_state().attn;
    Segment s{w.pos(), uint64_t(first), uint64_t(count), 0, 0};
    w.begin();
    for (size_t il = 0; il < kv.k.size(); ++il) {
        if (!kv.k[il]) continue;
        for (ggml_tensor * t : {kv.k[il], kv.v[il]}) w.tensor(t, size_t(first) * t->nb[1], size_t(count) * t->nb[1]);
    }
    s.bytes = w.pos() - s.offset;
    s.checksum = w.checksum();
    return s;
}

void write_blob(Engine & e, Writer & w, const Index & ix, const LogitRows::Saved & logits) {
    ContextState & kv = e.context_state();
    w.begin();
    for (size_t il = 0; il < kv.rec.conv.size(); ++il) {
        for (ggml_tensor * t : {kv.rec.conv[il], kv.rec.ssm[il]}) if (t) w.tensor(t, 0, ggml_nbytes(t));
    }
    if (ix.logits_values) w.bytes(logits.values.data(), logits.values.size() * sizeof(float));
    const size_t row = size_t(e.model().hp.n_embd) * sizeof(float);
    for (ggml_tensor * ring : kv.capture.rings) {
        ring_pieces(ix.cap_ring, ix.cap_first, ix.cap_rows,
                    [&](uint64_t r, uint64_t n) { w.tensor(ring, size_t(r) * row, size_t(n) * row); });
    }
}

// Blob and index of the current context after the segments; returns the record that commits them.
Record write_tail(Engine & e, Writer & w, Index ix, const LogitRows::Saved & logits) {
    Record rec{};
    rec.n_tokens = uint64_t(e.n_past());
    rec.blob_offset = w.pos();
    write_blob(e, w, ix, logits);
    rec.blob_bytes = w.pos() - rec.blob_offset;
    rec.blob_checksum = w.checksum();
    ix.tokens.assign(e.tokens(), e.tokens() + e.n_past());
    const std::vector<uint8_t> raw = serialize(ix);
    rec.index_offset = w.pos();
    w.begin();
    w.bytes(raw.data(), raw.size());
    rec.index_bytes = raw.size();
    rec.index_checksum = w.checksum();
    rec.end = w.pos();
    return rec;
}

void write_record(File & f, Record rec, uint64_t seq) {
    rec.seq = seq;
    rec.checksum = record_checksum(rec);
    f.write_exact(&rec, sizeof rec, kRecordAt[seq % 2]);
}

Index current_blob_layout(Engine & e, LogitRows::Saved & logits) {
    logits = e.last_logits();
    return blob_layout(e, logits.argmax, !logits.values.empty());
}

luce_state_io write_full(Engine & e, const std::string & path) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string tmp = path + ".tmp-" + std::to_string(current_pid());
    try {
        File f(tmp, File::Create);
        Staging st(e.model().dev);
        Writer w(f, kHeaderBytes, st);
        LogitRows::Saved logits;
        Index ix = current_blob_layout(e, logits);
        if (e.n_past() > 0) ix.segments.push_back(write_segment(e, w, 0, e.n_past()));
        Record rec = write_tail(e, w, ix, logits);
        const Identity id = identity_of(e);
        std::vector<uint8_t> header(kHeaderBytes, 0);
        std::memcpy(header.data(), &id, sizeof id);
        f.write_exact(header.data(), header.size(), 0);
        write_record(f, rec, 1);
        f.sync();
        f.close();
        rename_over(tmp, path);
        luce_state_io io{};
        io.n_tokens = e.n_past();
        io.bytes = rec.end;
        io.appended = false;
        io.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        return io;
    } catch (...) {
        remove_quietly(tmp);
        throw;
    }
}

// Appends the rows after the file's context when the file holds a prefix of this context; nothing
// (std::nullopt) when a full write is due: another engine's file, not a prefix, damaged, or more
// superseded than live data.
std::optional<luce_state_io> try_append(Engine & e, const std::string & path) {
    if (!file_exists(path)) return std::nullopt;
    const auto t0 = std::chrono::steady_clock::now();
    std::optional<Opened> o;
    try {
        o.emplace(open_state(path, /*writable=*/true, /*need_index=*/true));
    } catch (const Error & err) {
        if (err.status == LUCE_ERR_STATE_IO) throw;
        return std::nullopt;   // damaged or newer: replaced by a full write
    }
    const Identity id = identity_of(e);
    if (std::memcmp(&id, &o->id, sizeof id) != 0) return std::nullopt;
    const auto & old = o->index.tokens;
    const int32_t n_old = int32_t(old.size()), n = e.n_past();
    if (n_old > n || !std::equal(old.begin(), old.end(), e.tokens())) return std::nullopt;
    luce_state_io io{};
    io.n_tokens = n;
    io.appended = true;
    if (n_old == n && o->index.cap_layers == blob_layout(e, -1, false).cap_layers) return io;   // nothing new

    LogitRows::Saved logits;
    Index ix = current_blob_layout(e, logits);
    const uint64_t seg_bytes = uint64_t(n - n_old) * kv_token_bytes(e.context_state().attn);
    uint64_t live = kHeaderBytes + seg_bytes + blob_bytes(ix, e.model().hp.n_vocab, e.model().hp.n_embd);
    for (const Segment & s : o->index.segments) live += s.bytes;
    const uint64_t dead = o->rec.dead_bytes + o->rec.blob_bytes + o->rec.index_bytes;
    if (dead > live / 2) return std::nullopt;   // compact

    Staging st(e.model().dev);
    Writer w(o->file, o->rec.end, st);
    ix.segments = o->index.segments;
    Record rec{};
    try {
        if (n > n_old) ix.segments.push_back(write_segment(e, w, n_old, n - n_old));
        rec = write_tail(e, w, ix, logits);
        rec.dead_bytes = dead;
        o->file.sync();                      // the new data is on disk before the record points to it
    } catch (...) {
        o->file.truncate_quietly(o->rec.end);   // the old state never reached past its end
        throw;
    }
    write_record(o->file, rec, o->rec.seq + 1);
    o->file.sync();
    io.bytes = rec.end - o->rec.end;
    io.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return io;
}

void check_matches(Engine & e, const Opened & o, const std::string & path) {
    const Identity id = identity_of(e);
    const Identity & f = o.id;
    if (f.model_file_size != id.model_file_size || f.model_hash != id.model_hash || f.n_layer != id.n_layer ||
        f.n_embd != id.n_embd || f.n_vocab != id.n_vocab) {
        throw Error(LUCE_ERR_STATE_MISMATCH,
                    "state file " + path + " was saved with another model (" + std::string(f.arch, strnlen(f.arch, sizeof f.arch)) +
                        ", a GGUF of " + std::to_string(f.model_file_size) + " bytes); this engine runs " + e.model().path);
    }
    if (f.type_k != id.type_k || f.type_v != id.type_v) {
        throw Error(LUCE_ERR_STATE_MISMATCH,
                    "state file " + path + " holds a KV cache of type " + cache_type_name(luce_cache_type(f.type_k)) + "/" +
                        cache_type_name(luce_cache_type(f.type_v)) + "; this engine's is " +
                        cache_type_name(luce_cache_type(id.type_k)) + "/" + cache_type_name(luce_cache_type(id.type_v)));
    }
    if (f.kv_rotation != id.kv_rotation) {
        throw Error(LUCE_ERR_STATE_MISMATCH, "state file " + path + " was saved with the KV rotation " +
                                                 (f.kv_rotation ? "on" : "off") + " and this engine has it " +
                                                 (id.kv_rotation ? "on" : "off"));
    }
    if (o.rec.n_tokens > uint64_t(e.n_ctx())) {
        throw Error(LUCE_ERR_STATE_MISMATCH, "state file " + path + " holds " + std::to_string(o.rec.n_tokens) +
                                                 " tokens, more than this engine's context of " + std::to_string(e.n_ctx()));
    }
}

// Everything the payload must be, from the index, before the engine is touched.
void check_payload_shape(Engine & e, const Opened & o, const std::string & path) {
    const uint64_t per_token = kv_token_bytes(e.context_state().attn);
    for (const Segment & s : o.index.segments) {
        if (s.bytes != s.count * per_token) damaged(path, "a segment's size does not fit its token range");
    }
    const Index & ix = o.index;
    for (int32_t t : ix.tokens) {
        if (t < 0 || t >= e.model().hp.n_vocab) damaged(path, "a token id lies outside the vocabulary");
    }
    if (ix.recurrent_bytes != recurrent_bytes(e.context_state().rec)) damaged(path, "its recurrent state has the wrong size");
    if (ix.cap_first + ix.cap_rows != o.rec.n_tokens && ix.cap_rows > 0) damaged(path, "its capture rows are misplaced");
    if (ix.logits_argmax >= e.model().hp.n_vocab) damaged(path, "its saved greedy token lies outside the vocabulary");
    if (blob_bytes(ix, e.model().hp.n_vocab, e.model().hp.n_embd) != o.rec.blob_bytes) damaged(path, "its blob has the wrong size");
}

luce_state_io read_payload(Engine & e, Opened & o, const std::string & path) {
    ContextState & kv = e.context_state();
    const Index & ix = o.index;
    PayloadReader r(o.file, e.model().dev, e.params().debug_staged_state_io);
    for (const Segment & s : ix.segments) {
        r.part(s.offset, s.checksum, "the K/V rows of tokens " + std::to_string(s.first) + ".. do not match their checksum");
        for (size_t il = 0; il < kv.attn.k.size(); ++il) {
            if (!kv.attn.k[il]) continue;
            for (ggml_tensor * t : {kv.attn.k[il], kv.attn.v[il]}) r.tensor(t, size_t(s.first) * t->nb[1], size_t(s.count) * t->nb[1]);
        }
    }
    r.part(o.rec.blob_offset, o.rec.blob_checksum, "its recurrent state, logits or capture rows do not match their checksum");
    for (size_t il = 0; il < kv.rec.conv.size(); ++il) {
        for (ggml_tensor * t : {kv.rec.conv[il], kv.rec.ssm[il]}) if (t) r.tensor(t, 0, ggml_nbytes(t));
    }
    LogitRows::Saved logits;
    logits.argmax = ix.logits_argmax;
    if (ix.logits_values) {
        logits.values.resize(size_t(e.model().hp.n_vocab));
        r.bytes(logits.values.data(), logits.values.size() * sizeof(float));
    }
    // Capture rows go back when the engine captures the same layers the same way; else they are skipped.
    const auto & cap = kv.capture;
    const bool same_capture = !cap.layers.empty() && ix.cap_output == uint32_t(cap.output_convention) &&
                              std::equal(ix.cap_layers.begin(), ix.cap_layers.end(), cap.layers.begin(), cap.layers.end());
    const size_t row = size_t(e.model().hp.n_embd) * sizeof(float);
    const uint64_t keep = same_capture ? std::min<uint64_t>(ix.cap_rows, uint64_t(cap.ring)) : 0;
    for (size_t l = 0; l < ix.cap_layers.size(); ++l) {
        r.skip((ix.cap_rows - keep) * row);
        if (keep == 0) continue;
        ring_pieces(cap.ring, o.rec.n_tokens - keep, keep,
                    [&](uint64_t rr, uint64_t n) { r.tensor(cap.rings[l], size_t(rr) * row, size_t(n) * row); });
    }
    luce_state_io io{};
    io.bytes = r.run();
    e.adopt_state(ix.tokens, std::move(logits));
    io.n_tokens = e.n_past();
    io.n_captured = int32_t(keep);
    return io;
}

} // namespace

uint64_t engine_state_bytes(Engine & e) {
    const LogitRows::Saved logits = e.last_logits();
    Index ix = blob_layout(e, logits.argmax, !logits.values.empty());
    if (e.n_past() > 0) ix.segments.push_back({});
    ix.tokens.resize(size_t(e.n_past()));
    return kHeaderBytes + uint64_t(e.n_past()) * kv_token_bytes(e.context_state().attn) +
           blob_bytes(ix, e.model().hp.n_vocab, e.model().hp.n_embd) + serialize(ix).size();
}

luce_state_io save_engine_state(Engine & e, const std::string & path, bool allow_append) {
    if (e.has_pending()) throw Error(LUCE_ERR_STATE, "a verification is pending: commit it before saving the state");
    WriteLock lock(path);
    if (allow_append) {
        if (auto io = try_append(e, path)) return *io;
    }
    return write_full(e, path);
}

luce_state_io load_engine_state(Engine & e, const std::string & path) {
    if (e.has_pending()) throw Error(LUCE_ERR_STATE, "a verification is pending: commit it before loading a state");
    const auto t0 = std::chrono::steady_clock::now();
    Opened o = open_state(path, /*writable=*/false, /*need_index=*/true);
    check_matches(e, o, path);
    check_payload_shape(e, o, path);
    luce_state_io io{};
    try {
        io = read_payload(e, o, path);
    } catch (...) {
        e.drop_context();   // the stores hold part of the file: nothing of the old context is left either
        throw;
    }
    io.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return io;
}

luce_state_info read_state_info(const std::string & path) {
    Opened o = open_state(path, false, true);
    luce_state_info info{};
    info.format_version = o.id.version;
    info.n_tokens = int32_t(o.rec.n_tokens);
    info.n_ctx = o.id.n_ctx;
    info.type_k = o.id.type_k;
    info.type_v = o.id.type_v;
    info.kv_rotation = o.id.kv_rotation != 0;
    std::memcpy(info.arch, o.id.arch, sizeof info.arch);
    info.arch[sizeof info.arch - 1] = '\0';
    info.model_file_size = o.id.model_file_size;
    info.model_hash = o.id.model_hash;
    info.file_bytes = o.file.size();
    uint64_t live = kHeaderBytes + o.rec.blob_bytes + o.rec.index_bytes;
    for (const Segment & s : o.index.segments) live += s.bytes;
    info.live_bytes = live;
    info.n_capture_rows = int32_t(o.index.cap_rows);
    return info;
}

std::vector<int32_t> read_state_tokens(const std::string & path) {
    return open_state(path, false, true).index.tokens;
}

} // namespace luce
