// JSON manifests (array or JSON Lines) with validated fields.
#include "benchhost/data/manifest.hpp"

#include <nlohmann/json.hpp>

#include "benchhost/data/file.hpp"
#include "benchhost/error.hpp"

namespace benchhost::data {

struct ManifestRecord::Impl {
  nlohmann::json value;
  std::string name;  // manifest path
  std::int64_t index = 0;
};

namespace {

const char* type_name(FieldType t) {
  switch (t) {
    case FieldType::string: return "a string";
    case FieldType::integer: return "an integer";
    case FieldType::number: return "a number";
    case FieldType::boolean: return "a boolean";
    case FieldType::array: return "an array";
    case FieldType::object: return "an object";
    case FieldType::any: return "anything";
  }
  return "?";
}

bool has_type(const nlohmann::json& v, FieldType t) {
  switch (t) {
    case FieldType::string: return v.is_string();
    case FieldType::integer: return v.is_number_integer();
    case FieldType::number: return v.is_number();
    case FieldType::boolean: return v.is_boolean();
    case FieldType::array: return v.is_array();
    case FieldType::object: return v.is_object();
    case FieldType::any: return true;
  }
  return false;
}

const nlohmann::json& field(const ManifestRecord::Impl& r, const std::string& name, FieldType want) {
  auto it = r.value.find(name);
  if (it == r.value.end()) BH_THROW(DataError, "{}: record {}: no field '{}'", r.name, r.index, name);
  if (!has_type(*it, want))
    BH_THROW(DataError, "{}: record {}: field '{}' must be {}, got {}", r.name, r.index, name, type_name(want),
             it->type_name());
  return *it;
}

}  // namespace

bool ManifestRecord::has(const std::string& f) const { return impl_->value.contains(f); }
std::string ManifestRecord::get_string(const std::string& f) const { return field(*impl_, f, FieldType::string).get<std::string>(); }
std::int64_t ManifestRecord::get_int(const std::string& f) const { return field(*impl_, f, FieldType::integer).get<std::int64_t>(); }
double ManifestRecord::get_number(const std::string& f) const { return field(*impl_, f, FieldType::number).get<double>(); }
bool ManifestRecord::get_bool(const std::string& f) const { return field(*impl_, f, FieldType::boolean).get<bool>(); }
std::string ManifestRecord::get_json(const std::string& f) const { return field(*impl_, f, FieldType::any).dump(); }
std::string ManifestRecord::dump() const { return impl_->value.dump(); }

Manifest Manifest::parse(const std::string& text, const std::string& name, const std::vector<ManifestField>& fields) {
  std::vector<nlohmann::json> records;
  std::size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) BH_THROW(DataError, "{}: empty manifest", name);
  if (text[first] == '[') {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      BH_THROW(DataError, "{}: invalid JSON: {}", name, e.what());
    }
    for (auto& r : doc) records.push_back(std::move(r));
  } else {  // JSON Lines
    std::size_t line_no = 0, pos = 0;
    while (pos <= text.size()) {
      std::size_t end = text.find('\n', pos);
      if (end == std::string::npos) end = text.size();
      ++line_no;
      const std::string line = text.substr(pos, end - pos);
      pos = end + 1;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        records.push_back(nlohmann::json::parse(line));
      } catch (const nlohmann::json::exception& e) {
        BH_THROW(DataError, "{}: line {}: invalid JSON: {}", name, line_no, e.what());
      }
    }
  }
  Manifest m;
  m.path_ = name;
  m.records_.reserve(records.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (!records[i].is_object())
      BH_THROW(DataError, "{}: record {} is {}, expected an object", name, i, records[i].type_name());
    for (const auto& f : fields) {
      auto it = records[i].find(f.name);
      if (it == records[i].end()) {
        if (f.required) BH_THROW(DataError, "{}: record {}: required field '{}' is missing", name, i, f.name);
        continue;
      }
      if (!has_type(*it, f.type))
        BH_THROW(DataError, "{}: record {}: field '{}' must be {}, got {}", name, i, f.name, type_name(f.type),
                 it->type_name());
    }
    auto impl = std::make_shared<ManifestRecord::Impl>();
    impl->value = std::move(records[i]);
    impl->name = name;
    impl->index = static_cast<std::int64_t>(i);
    ManifestRecord r;
    r.impl_ = std::move(impl);
    m.records_.push_back(std::move(r));
  }
  return m;
}

Manifest Manifest::read(const std::string& path, const std::vector<ManifestField>& fields) {
  const auto bytes = read_file(path, std::size_t{1} << 32);
  return parse(std::string(bytes.begin(), bytes.end()), path, fields);
}

const ManifestRecord& Manifest::operator[](std::int64_t i) const {
  if (i < 0 || i >= size()) BH_THROW(InvalidArgument, "{}: record {} out of range ({} records)", path_, i, size());
  return records_[static_cast<std::size_t>(i)];
}

}  // namespace benchhost::data
