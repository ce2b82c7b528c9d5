// Names and texts of error codes as NVIDIA's libraries give them
// (cudaGetErrorName/String, cublasGetStatusName/String, cuBLASLt's): tables
// generated at build time from the toolkit's own libraries by
// client/gen_error_table.cc, looked up here.
#pragma once

#include <cstddef>

namespace rgpu::client {

struct ErrorEntry {
  int code;
  const char* name;
  const char* text;
};

struct ErrorTable {
  const ErrorEntry* entries;
  size_t count;
  const char* unrecognized_name;  // what the library says for a code it does not know
  const char* unrecognized_text;
};

inline const ErrorEntry* findError(const ErrorTable& t, int code) {
  for (size_t i = 0; i < t.count; ++i)
    if (t.entries[i].code == code) return &t.entries[i];
  return nullptr;
}
inline const char* errorName(const ErrorTable& t, int code) {
  const ErrorEntry* e = findError(t, code);
  return e ? e->name : t.unrecognized_name;
}
inline const char* errorText(const ErrorTable& t, int code) {
  const ErrorEntry* e = findError(t, code);
  return e ? e->text : t.unrecognized_text;
}

}  // namespace rgpu::client
