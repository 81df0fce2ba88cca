#pragma once
/// @file data/manifest.hpp  JSON manifests: a list of records with validated fields.
///
/// A manifest is either a JSON array of objects or JSON Lines (one object per line, as NeMo and
/// the MLPerf RNN-T preparation write them). Required fields are checked for every record at
/// load time, so a bad manifest fails at setup with "manifest.json: record 17: field 'duration'
/// must be a number, got string" rather than mid-epoch.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace benchhost::data {

enum class FieldType { string, integer, number, boolean, array, object, any };

/// A field a record must (or may) have.
struct ManifestField {
  std::string name;
  FieldType type = FieldType::any;
  bool required = true;
};

/// One record of a manifest. Accessors throw DataError naming the manifest, record and field.
class ManifestRecord {
 public:
  bool has(const std::string& field) const;
  std::string get_string(const std::string& field) const;
  std::int64_t get_int(const std::string& field) const;
  double get_number(const std::string& field) const;  ///< integers convert
  bool get_bool(const std::string& field) const;
  /// The field as JSON text (arrays, objects).
  std::string get_json(const std::string& field) const;
  /// The whole record as JSON text.
  std::string dump() const;

  struct Impl;  ///< opaque (the parsed JSON value)

 private:
  friend class Manifest;
  std::shared_ptr<const Impl> impl_;
};

/// A loaded, validated manifest. Immutable; thread-safe to read.
class Manifest {
 public:
  /// Parse and validate. Throws DataError naming the file (and the record and field).
  static Manifest read(const std::string& path, const std::vector<ManifestField>& fields = {});
  static Manifest parse(const std::string& text, const std::string& name,
                        const std::vector<ManifestField>& fields = {});
  std::int64_t size() const { return static_cast<std::int64_t>(records_.size()); }
  const ManifestRecord& operator[](std::int64_t i) const;
  const std::string& path() const { return path_; }

 private:
  std::vector<ManifestRecord> records_;
  std::string path_;
};

}  // namespace benchhost::data
