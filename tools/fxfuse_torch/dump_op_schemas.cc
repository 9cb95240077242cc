// Prints the schema strings of the built-in op table (ir/op_schema.cc) for the namespaces
// given on the command line, one per line. tools/fxfuse_torch/fxfuse_torch/schemas.py is
// generated from this output (gen_schemas.sh) and schema_parity_test checks they agree.
#include <cstdio>
#include <set>
#include <string>

#include "ir/op_schema.h"

int main(int argc, char** argv) {
  std::set<std::string> namespaces(argv + 1, argv + argc);
  for (const auto& [target, schema] : fxfuse::ir::OpRegistry::builtin().all())
    if (namespaces.count(schema.ns)) std::printf("%s\n", schema.text.c_str());
  return 0;
}
