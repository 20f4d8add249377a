// Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/
// (README.md there): valid inputs from ember's own writers and the test
// fixtures, and the malformed cases each reader must refuse, among them those
// the reference safetensors implementation tests for (huggingface/safetensors,
// the tests of safetensors/src/tensor.rs and attacks/). Each seed is one file
// named for what it is; files of the same name are replaced, others (the
// reproducers of bugs found) are left alone. Run from a fuzz build:
//   build-fuzz/tests/fuzz/fuzz_make_seeds
#include <zlib.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>

#include <nlohmann/json.hpp>

#include "config_file.h"
#include "distributed/checkpoint/manifest.h"
#include "distributed/store/wire.h"
#include "fuzz/fixtures.h"

using namespace ember;
using Json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kSource = EMBER_SOURCE_DIR;
const fs::path kCorpus = kSource / "tests" / "fuzz" / "corpus";

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FUZZ_REQUIRE(in.good(), "cannot read '{}'", path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void seed(const std::string& target, const std::string& name, std::string_view bytes) {
  fs::create_directories(kCorpus / target);
  fuzz::write_file(kCorpus / target / name, bytes);
}

std::string gzipped(std::string_view bytes) {
  uLongf size = compressBound(uLong(bytes.size())) + 32;
  std::string out(size, '\0');
  z_stream stream{};
  FUZZ_REQUIRE(deflateInit2(&stream, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK, "deflateInit2");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
  stream.avail_in = uInt(bytes.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = uInt(out.size());
  FUZZ_REQUIRE(deflate(&stream, Z_FINISH) == Z_STREAM_END, "deflate");
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return out;
}

std::string little_endian_u64(uint64_t value) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(char(value >> (8 * i)));
  return bytes;
}

std::string big_endian_u32(uint32_t value) {
  return {char(value >> 24), char(value >> 16), char(value >> 8), char(value)};
}

// ---------------------------------------------------------------------------
// safetensors

// A file of `header` and `data`, its length field `declared` (the header's own length by default).
std::string safetensors_file(std::string_view header, std::string_view data, std::optional<uint64_t> declared = {}) {
  return little_endian_u64(declared.value_or(header.size())) + std::string(header) + std::string(data);
}

std::string written_by_ember(const NamedTensors& tensors, const std::map<std::string, std::string>& metadata = {}) {
  const fs::path path = fuzz::scratch_directory() / "seed.safetensors";
  save_safetensors(path, tensors, metadata);
  return read_bytes(path);
}

void safetensors_seeds() {
  for (const auto& entry : fs::directory_iterator(kSource / "tests" / "data" / "safetensors"))
    seed("safetensors", "reference_writer_" + entry.path().stem().string(), read_bytes(entry.path()));

  NamedTensors every_dtype;
  for (DType dtype : kAllDTypes)
    every_dtype.emplace_back(std::string(dtype_name(dtype)), arange(0, 6).to(dtype).reshape({2, 3}));
  seed("safetensors", "ember_every_dtype", written_by_ember(every_dtype, {{"step", "3"}}));
  seed("safetensors", "ember_zero_dim_and_empty",
       written_by_ember({{"scalar", scalar_tensor(2.5, {.dtype = DType::f64})},
                         {"empty", zeros({0, 4})},
                         {"also_empty", zeros({3, 0}, {.dtype = DType::i64})}}));
  seed("safetensors", "ember_no_tensors", written_by_ember({}));
  const std::string every_dtype_file = written_by_ember(every_dtype);
  seed("safetensors", "ember_truncated", every_dtype_file.substr(0, every_dtype_file.size() - 5));

  // The reference's own test cases (tests module of safetensors/src/tensor.rs).
  const std::string i32_2x2 = R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]}})";
  const std::string sixteen_zeros(16, '\0');
  seed("safetensors", "reference_deserialization", safetensors_file(i32_2x2, sixteen_zeros));
  seed("safetensors", "reference_header_too_small_empty", "");
  seed("safetensors", "reference_header_too_small", std::string("\x3c\x00\x00", 3));
  seed("safetensors", "reference_invalid_header_length", little_endian_u64(60));
  seed("safetensors", "reference_invalid_header_non_utf8", safetensors_file("\xff", ""));
  seed("safetensors", "reference_invalid_header_not_json", safetensors_file("{", ""));
  seed("safetensors", "reference_whitespace_padded_header", safetensors_file("{}\r \t\n", ""));
  seed("safetensors", "reference_whitespace_start_padded_header", safetensors_file("\t\n{}\r ", ""));
  seed("safetensors", "reference_header_too_large",
       safetensors_file(i32_2x2, sixteen_zeros, 0xffffff000000003cull));
  seed("safetensors", "reference_zero_sized_tensor",
       safetensors_file(R"({"test":{"dtype":"I32","shape":[2,0],"data_offsets":[0, 0]}})", ""));
  seed("safetensors", "reference_empty_shapes_allowed",
       safetensors_file(R"({"test":{"dtype":"I32","shape":[],"data_offsets":[0,4]}})", std::string(4, '\0')));
  seed("safetensors", "reference_invalid_info",
       safetensors_file(R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0, 4]}})", std::string(4, '\0')));
  seed("safetensors", "reference_validation_overflow_shape",
       safetensors_file(R"({"test":{"dtype":"I32","shape":[2,18446744073709551614],"data_offsets":[0,16]}})",
                        sixteen_zeros));
  seed("safetensors", "reference_validation_overflow_bytes",
       safetensors_file(R"({"test":{"dtype":"I32","shape":[2,9223372036854775807],"data_offsets":[0,16]}})",
                        sixteen_zeros));
  seed("safetensors", "reference_metadata_incomplete_buffer_polyglot",
       safetensors_file(i32_2x2, sixteen_zeros + "extra_bogus_data_for_polyglot_file"));
  seed("safetensors", "reference_metadata_incomplete_buffer_missing", safetensors_file(i32_2x2, std::string(14, '\0')));
  Json same_offsets = Json::object();
  for (int i = 0; i < 10; ++i)
    same_offsets[fmt::format("weight_{}", i)] = {{"dtype", "F32"}, {"shape", {2, 2}}, {"data_offsets", {0, 16}}};
  seed("safetensors", "reference_json_attack", safetensors_file(same_offsets.dump(), sixteen_zeros));
  // attacks/safetensors_abuse_attempt_1.py: a length past the end of the file.
  seed("safetensors", "reference_abuse_length_past_the_end",
       safetensors_file(R"({"weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", sixteen_zeros, 1000));

  // What ember refuses beyond the reference (core/safetensors.cpp), and what it must still read.
  const auto one = [&](const std::string& name, const std::string& header, std::string_view data) {
    seed("safetensors", name, safetensors_file(header, data));
  };
  one("duplicate_tensor", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
      std::string(8, '\0'));
  one("duplicate_field", R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  one("metadata_not_strings", R"({"__metadata__":{"a":1}})", "");
  one("metadata_not_object", R"({"__metadata__":[]})", "");
  one("negative_offset", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", "");
  one("float_in_shape", R"({"a":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(4, '\0'));
  one("unknown_dtype", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", std::string(1, '\0'));
  one("three_offsets", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}})", std::string(4, '\0'));
  one("overlapping_offsets", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      std::string(12, '\0'));
  one("offsets_far_past_the_end", R"({"a":{"dtype":"F32","shape":[274877906944],"data_offsets":[0,1099511627776]}})",
      std::string(4, '\0'));
  one("gap_between_tensors", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
      std::string(12, '\0'));
  one("begin_after_end", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}})", std::string(4, '\0'));
  one("nul_in_header", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})" + std::string("\0  ", 3),
      std::string(4, '\0'));
  one("too_many_dims", R"({"a":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"data_offsets":[0,4]}})",
      std::string(4, '\0'));
  one("unknown_fields_skipped", R"({"a":{"dtype":"F32","extra":{"x":[1,{"y":null}],"z":true},"shape":[1],"data_offsets":[0,4]}})",
      std::string(4, '\0'));
  one("deep_unknown_field", R"({"a":{"dtype":"F32","extra":)" + std::string(3000, '[') + std::string(3000, ']') +
                                R"(,"shape":[1],"data_offsets":[0,4]}})",
      std::string(4, '\0'));
  one("misaligned_f64", R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\x3f'));
  one("not_an_object", "[1,2]", "");
}

// ---------------------------------------------------------------------------
// sharded_index

void sharded_index_seeds() {
  const fs::path root = fuzz::scratch_directory() / "sharded";
  const fuzz::ShardedFixture fixture = fuzz::write_sharded_fixture(root);
  const std::string valid = read_bytes(fixture.index);
  seed("sharded_index", "valid", valid);
  const Json index = Json::parse(valid);
  const auto variant = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    Json edited = index;
    edit(edited);
    seed("sharded_index", name, edited.dump());
  };
  const std::pair<const char*, std::string> hostile[] = {
      {"parent", "../outside.safetensors"},
      {"absolute", "/etc/passwd"},
      {"subdirectory", "sub/model-00002-of-00002.safetensors"},
      {"empty", ""},
      {"dot", "."},
      {"dot_dot", ".."},
      {"nul", std::string("model-00002-of-00002.safetensors\0/../x", 38)},
      {"nul_after_a_shard", std::string("model-00002-of-00002.safetensors\0", 33)},
      {"backslash_parent", "..\\outside.safetensors"},
      {"backslash_subdirectory", "sub\\model-00002-of-00002.safetensors"},
      {"not_a_shard", "notes.txt"},
      {"the_index_itself", "model.safetensors.index.json"},
      {"missing_shard", "model-00003-of-00003.safetensors"},
      {"long_name", std::string(300, 'a')},
      {"wrong_shard", "model-00001-of-00002.safetensors"},
  };
  for (const auto& entry : hostile)
    variant(std::string("weight_map_") + entry.first, [&](Json& edited) { edited["weight_map"]["bias"] = entry.second; });
  variant("unlisted_tensor", [](Json& edited) { edited["weight_map"].erase("bias"); });
  variant("extra_tensor", [](Json& edited) { edited["weight_map"]["other"] = "model-00001-of-00002.safetensors"; });
  variant("many_entries", [](Json& edited) {
    for (int i = 0; i < 300; ++i) edited["weight_map"][fmt::format("layer.{}", i)] = "model-00002-of-00002.safetensors";
  });
  variant("total_size_negative", [](Json& edited) { edited["metadata"]["total_size"] = -1; });
  variant("total_size_text", [](Json& edited) { edited["metadata"]["total_size"] = "32"; });
  variant("metadata_array", [](Json& edited) { edited["metadata"] = Json::array(); });
  variant("weight_map_array", [](Json& edited) { edited["weight_map"] = Json::array({"a"}); });
  variant("no_weight_map", [](Json& edited) { edited.erase("weight_map"); });
  std::string repeated = valid;
  repeated.insert(repeated.find("\"weight_map\": {") + 15, "\"bias\": \"model-00001-of-00002.safetensors\",");
  seed("sharded_index", "repeated_key", repeated);
  seed("sharded_index", "not_json", valid.substr(0, valid.size() / 2));
  seed("sharded_index", "nul_after_json", valid + std::string("\0garbage", 8));
}

// ---------------------------------------------------------------------------
// manifest

void manifest_seeds() {
  const fs::path root = fuzz::scratch_directory() / "manifest";
  const fuzz::CheckpointFixture fixture = fuzz::write_checkpoint_fixture(root);
  distributed::checkpoint::write_manifest(fixture.directory, 2, {{"step", 7}, {"mixed_precision", "bf16"}});
  const std::string valid = read_bytes(fixture.directory / distributed::checkpoint::kManifestName);
  seed("manifest", "valid", valid);
  const Json manifest = Json::parse(valid);
  const auto variant = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    Json edited = manifest;
    edit(edited);
    seed("manifest", name, edited.dump(1));
  };
  const Json& model = manifest["files"]["model.safetensors"];
  for (const auto& entry : std::vector<std::pair<std::string, std::string>>{
           {"parent", "../outside.bin"},
           {"absolute", "/etc/passwd"},
           {"symlink_to_outside", "link.bin"},
           {"through_symlinked_directory", "up/outside.bin"},
           {"fifo", "fifo"},
           {"directory", "optimizer"},
           {"dot_component", "./model.safetensors"},
           {"dot_dot_component", "optimizer/../model.safetensors"},
           {"empty_component", "optimizer//state.safetensors"},
           {"missing", "absent.bin"},
           {"nul", std::string("model.safetensors\0x", 19)},
       })
    variant("file_" + entry.first, [&](Json& edited) { edited["files"][entry.second] = model; });
  variant("wrong_size", [](Json& edited) { edited["files"]["trainer_state.json"]["size"] = 3; });
  variant("wrong_sha256", [](Json& edited) { edited["files"]["trainer_state.json"]["sha256"] = std::string(64, 'a'); });
  variant("uppercase_sha256", [](Json& edited) {
    std::string sha = edited["files"]["trainer_state.json"]["sha256"];
    for (char& c : sha) c = char(std::toupper(static_cast<unsigned char>(c)));
    edited["files"]["trainer_state.json"]["sha256"] = sha;
  });
  variant("world_size_zero", [](Json& edited) { edited["world_size"] = 0; });
  variant("world_size_huge", [](Json& edited) { edited["world_size"] = uint64_t(1) << 63; });
  variant("version_2", [](Json& edited) { edited["version"] = 2; });
  variant("unknown_field", [](Json& edited) { edited["extra"] = true; });
  variant("tensor_of_unlisted_file", [](Json& edited) { edited["tensors"][0]["file"] = "absent.safetensors"; });
  variant("tensor_listed_twice", [](Json& edited) { edited["tensors"].push_back(edited["tensors"][0]); });
  variant("numel_mismatch", [](Json& edited) { edited["tensors"][0]["numel"] = 5; });
  variant("shape_overflow", [](Json& edited) {
    edited["tensors"][0]["shape"] = {uint64_t(1) << 62, 8};
    edited["tensors"][0]["numel"] = 0;
  });
  variant("offset_overflow", [](Json& edited) { edited["tensors"][0]["offset"] = int64_t(9223372036854775807); });
  variant("unknown_dtype", [](Json& edited) { edited["tensors"][0]["dtype"] = "U8"; });
  variant("empty_param", [](Json& edited) { edited["tensors"][0]["param"] = ""; });
  variant("metadata_not_object", [](Json& edited) { edited["metadata"] = 3; });
  seed("manifest", "not_json", valid.substr(0, valid.size() / 3));
}

// ---------------------------------------------------------------------------
// config_yaml

void config_yaml_seeds() {
  for (const char* name : {"accelerate_multi_cpu_config.yaml", "accelerate_legacy_gpu_config.yaml",
                           "accelerate_deepspeed_config.yaml", "accelerate_fsdp_config.yaml"})
    seed("config_yaml", name, read_bytes(kSource / "tests" / "data" / name));
  seed("config_yaml", "ember_written",
       launch::config_yaml({{"num_processes", "4"}, {"num_machines", "2"}, {"machine_rank", "1"},
                            {"main_process_ip", "10.0.0.1"}, {"main_process_port", "29500"},
                            {"mixed_precision", "bf16"}, {"gradient_accumulation_steps", "2"}, {"use_cpu", "true"},
                            {"seed", "-7"}, {"project_dir", "yes"}, {"total_limit", "3"}}));
  const std::pair<const char*, const char*> cases[] = {
      {"empty", ""},
      {"null_values", "main_process_ip: null\nnum_processes:\nmixed_precision: ~\n"},
      {"quoted_number", "num_processes: '2'\n"},
      {"quoted_boolean", "use_cpu: \"true\"\n"},
      {"yaml_1_1_booleans", "use_cpu: yes\nsplit_batches: off\neven_batches: On\n"},
      {"anchor_and_alias", "num_processes: &n 4\ngradient_accumulation_steps: *n\n"},
      {"undefined_alias", "num_processes: *nothing\n"},
      {"merge_key", "base: &base {num_processes: 2}\n<<: *base\n"},
      {"tags", "num_processes: !!int 3\nmain_process_ip: !!binary aGVsbG8=\nseed: !custom 5\n"},
      {"complex_key", "? [num_processes, 2]\n: 1\n"},
      {"duplicate_key", "num_processes: 2\nnum_processes: 3\n"},
      {"nested_values", "num_processes: [1, 2]\nmain_process_ip: {a: b}\n"},
      {"two_documents", "num_processes: 2\n---\nnum_processes: 3\n"},
      {"flow_mapping", "{num_processes: 2, use_cpu: true, mixed_precision: fp16}"},
      {"top_level_list", "- num_processes\n- 2\n"},
      {"out_of_range", "num_processes: 99999999999999999999\nmain_process_port: 65536\nseed: -9223372036854775809\n"},
      {"rank_past_machines", "num_machines: 2\nmachine_rank: 2\n"},
      {"not_yaml", "num_processes: [2\n"},
      {"tabs_and_bom", "\xef\xbb\xbfnum_processes:\t2\n"},
      {"unknown_keys", "num_gpus: 8\nfsdp_config: {a: 1}\n"},
      {"sharding_keys", "strategy: zero2\nwrap_module_types: A, B\nmax_grad_norm: 1.0\nmin_num_params: 100\n"},
      {"sections_conflict", "gradient_accumulation_steps: 2\ndeepspeed_config:\n  gradient_accumulation_steps: '4'\n"
                            "  zero_stage: 3\nfsdp_config:\n  sharding_strategy: 2\n"},
      {"deep_nesting", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["},
  };
  for (const auto& [name, text] : cases) seed("config_yaml", name, text);
}

// ---------------------------------------------------------------------------
// store_wire: byte 0 is 1 (handshake first) unless the seed plays the handshake itself.

using distributed::wire::Encoder;
using distributed::wire::Op;

std::string frame(Op op, uint64_t id, const std::function<void(Encoder&)>& fields = {}) {
  Encoder encoder(uint8_t(op), id);
  if (fields) fields(encoder);
  const distributed::Bytes bytes = std::move(encoder).finish();
  return {bytes.begin(), bytes.end()};
}

std::string set_frame(uint64_t id, const std::string& key, const std::string& value) {
  return frame(Op::kSet, id, [&](Encoder& e) {
    e.string(key);
    e.string(value);
  });
}

void store_wire_seeds() {
  const std::string authenticated(1, '\1');
  const auto get = [](uint64_t id, const std::string& key, uint64_t timeout_ms) {
    return frame(Op::kGet, id, [&](Encoder& e) {
      e.u64(timeout_ms);
      e.string(key);
    });
  };
  const auto keys_frame = [](Op op, uint64_t id, const std::vector<std::string>& keys, std::optional<uint64_t> timeout) {
    return frame(op, id, [&](Encoder& e) {
      if (timeout) e.u64(*timeout);
      e.u32(uint32_t(keys.size()));
      for (const auto& key : keys) e.string(key);
    });
  };
  const auto add = [](uint64_t id, const std::string& key, int64_t delta) {
    return frame(Op::kAdd, id, [&](Encoder& e) {
      e.string(key);
      e.i64(delta);
    });
  };
  const auto store = [&](const std::string& name, const std::string& frames) { seed("store_wire", name, authenticated + frames); };
  store("every_request", set_frame(1, "a", "1") + get(2, "a", 1000) + add(3, "a", 41) +
                             keys_frame(Op::kWait, 4, {"a"}, 1000) + keys_frame(Op::kCheck, 5, {"a", "b"}, {}) +
                             frame(Op::kDelete, 6, [](Encoder& e) { e.string("a"); }) + frame(Op::kNumKeys, 7));
  store("get_missing_times_out", get(1, "missing", 0) + frame(Op::kNumKeys, 2));
  store("wait_then_set", keys_frame(Op::kWait, 1, {"x", "y"}, 50) + set_frame(2, "x", "") + set_frame(3, "y", "v"));
  store("add_to_text", set_frame(1, "t", "not a number") + add(2, "t", 1));
  store("add_overflows", add(1, "c", 9223372036854775807) + add(2, "c", 1));
  store("empty_key_and_value", set_frame(1, "", "") + get(2, "", 0));
  const std::string valid = set_frame(1, "k", "value");
  store("truncated_frame", valid.substr(0, valid.size() - 3));
  store("trailing_bytes", [&] {
    std::string longer = valid + "xy";
    longer[0] = char(uint8_t(longer[0]) + 2);
    return longer;
  }());
  store("length_too_large", std::string("\xff\xff\xff\xff", 4) + valid.substr(4));
  store("length_announces_a_gigabyte", std::string("\x00\x00\x00\x40", 4) + valid.substr(4));
  store("length_below_header", std::string("\x03\x00\x00\x00", 4) + "abc");
  store("unknown_op", frame(Op(0), 1) + frame(Op(99), 2));
  store("key_over_limit", frame(Op::kDelete, 1, [](Encoder& e) { e.u32(4097); }));
  store("too_many_keys", frame(Op::kCheck, 1, [](Encoder& e) { e.u32(1025); }));
  store("field_past_the_frame", frame(Op::kDelete, 1, [](Encoder& e) { e.u32(100); }));
  seed("store_wire", "handshake_wrong_proof", std::string(1, '\0') + std::string(64, '\0'));
  seed("store_wire", "handshake_short", std::string(1, '\0') + "EMB1");
  seed("store_wire", "handshake_then_frames", std::string(1, '\0') + std::string(64, 'x') + valid);
}

// ---------------------------------------------------------------------------
// idx: byte 0 picks the dtype (0: the file's own).

std::string idx_file(uint8_t type_code, const std::vector<uint32_t>& shape, std::string_view data) {
  std::string bytes = {'\0', '\0', char(type_code), char(shape.size())};
  for (uint32_t size : shape) bytes += big_endian_u32(size);
  return bytes + std::string(data);
}

void idx_seeds() {
  const std::string own(1, '\0'), as_f64(1, char(2)), as_bool(1, char(7));
  seed("idx", "u8_2x3", own + idx_file(0x08, {2, 3}, "\x01\x02\x03\xfd\xfe\xff"));
  seed("idx", "i8_as_bool", as_bool + idx_file(0x09, {4}, std::string("\x00\x01\x80\x7f", 4)));
  seed("idx", "i16", own + idx_file(0x0B, {2}, std::string("\x80\x00\x7f\xff", 4)));
  seed("idx", "i32_as_f64", as_f64 + idx_file(0x0C, {1, 1}, "\xff\xff\xff\xfe"));
  seed("idx", "f32", own + idx_file(0x0D, {2}, std::string("\x3f\x80\x00\x00\x7f\xc0\x00\x00", 8)));
  seed("idx", "f64_zero_dims", own + idx_file(0x0E, {}, std::string("\x40\x09\x21\xfb\x54\x44\x2d\x18", 8)));
  seed("idx", "empty_dim", own + idx_file(0x08, {0, 5}, ""));
  seed("idx", "f32_as_i32", std::string(1, char(5)) + idx_file(0x0D, {1}, std::string(4, '\0')));
  seed("idx", "gzipped_u8", own + gzipped(idx_file(0x08, {3, 2}, "abcdef")));
  seed("idx", "gzipped_truncated", own + gzipped(idx_file(0x0D, {4}, std::string(16, '\x41'))).substr(0, 20));
  seed("idx", "truncated_data", own + idx_file(0x0C, {3}, std::string(5, '\0')));
  seed("idx", "trailing_bytes", own + idx_file(0x08, {1}, "ab"));
  seed("idx", "bad_magic", own + std::string("\x01\x00\x08\x01", 4) + big_endian_u32(1) + "a");
  seed("idx", "unknown_type", own + idx_file(0x0A, {1}, "a"));
  seed("idx", "too_many_dims", own + idx_file(0x08, std::vector<uint32_t>(70, 1), "a"));
  seed("idx", "sizes_overflow", own + idx_file(0x0E, {0xffffffff, 0xffffffff, 0xffffffff}, ""));
  seed("idx", "fashion_mnist_test_labels",
       own + read_bytes("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"));
}

// ---------------------------------------------------------------------------
// csv: byte 0 the delimiter (0 ',', 1 ';', 2 tab, 3 space, 4 '|'), byte 1 the
// options (csv.cpp: bits 0-1 header, bit 2 f64, bits 3-4 column selection).

void csv_seeds() {
  const auto csv = [](const std::string& name, uint8_t delimiter, uint8_t flags, const std::string& text) {
    seed("csv", name, std::string{char(delimiter), char(flags)} + text);
  };
  csv("numbers", 0, 0, "1,2,3\n4.5,-6e3,+7\n");
  csv("header_detected", 0, 0, "a,b,c\n1,2,3\n4,5,6\n");
  csv("header_by_name_f64", 0, 4 | 2 << 3 | 1, "a,b,c\n1,2,3\n");
  csv("column_index", 0, 1 << 3 | 3 << 5, "1,2,3\n4,5,6\n");
  csv("negative_column_index", 0, 1 << 3 | 2 << 5, "1,2,3\n4,5,6\n");
  csv("name_and_index", 0, 3 << 3, "a,b\n1,2\n");
  csv("quoted", 0, 0, "\"a,x\",\"b\"\"y\"\n\"1\",\" 2 \"\n");
  csv("quoted_newline", 0, 1, "\"line\nbreak\",b\n1,2\n");
  csv("crlf_and_blank_lines", 0, 0, "a,b\r\n\r\n1,2\r\n\n3,4\r\n");
  csv("semicolons", 1, 0, "x;y\n1,5;2\n");
  csv("tabs", 2, 0, "1\t2\n3\t4\n");
  csv("spaces", 3, 2, "1 2\n3 4\n");
  csv("ragged", 0, 0, "1,2\n3\n");
  csv("unterminated_quote", 0, 0, "\"1,2\n3,4\n");
  csv("text_after_quote", 0, 0, "\"1\"x,2\n");
  csv("not_a_number", 0, 2, "1,2\nx,4\n");
  csv("empty_field", 0, 0, "1,,3\n");
  csv("out_of_range", 0, 0, "1e999,2\n");
  csv("quote_delimiter", 5, 0, "1\"2\n");
  csv("empty", 0, 0, "");
  csv("header_only", 0, 1, "a,b\n");
  csv("gzipped", 0, 0, gzipped("a,b\n1,2\n3,4\n"));
  csv("gzipped_corrupt", 0, 0, gzipped("1,2\n3,4\n").substr(0, 12) + "garbage");
}

}  // namespace

int main() {
  safetensors_seeds();
  sharded_index_seeds();
  manifest_seeds();
  config_yaml_seeds();
  store_wire_seeds();
  idx_seeds();
  csv_seeds();
  fmt::print("seeds written under {}\n", kCorpus.string());
  return 0;
}
